"""`midword bench jsts`: the official JSON-Schema-Test-Suite (draft 2020-12) through the
JSON Schema front end, midword beside llguidance.

Every case of `tests/data/json-schema-test-suite/draft2020-12` is one schema and one
instance, valid or not. An engine compiles the schema (or refuses it), then reads the
instance, spelled `json.dumps(data, ensure_ascii=False)` (the text an editor holds),
and says whether it is accepted. Per case the outcome is accepted/rejected/refused, or a
crash (any other exception) or a time-out; the counts set the two engines side by side:
accepted-valid and rejected-valid (higher and lower are better), accepted-invalid (a
grammar that allows what the schema forbids) and refusals.

midword reads the instance with `Matcher.consume_bytes` and `is_accepting`, as a client
would; llguidance reads its canonical tokenization with `consume_token`. midword is
given the suite's remote documents (`documents=`); llguidance has no such option.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

SUITE = Path(__file__).resolve().parents[2] / "tests" / "data" / "json-schema-test-suite" / "draft2020-12"
# The suite's remote documents, which its cases reach at http://localhost:1234/ + their
# path under remotes/; midword is handed them (never fetched), llguidance is not.
REMOTES = SUITE.parent / "remotes"
REMOTES_URL = "http://localhost:1234/"
# A schema's compile and all its instances, past which the case group is a time-out.
GROUP_TIMEOUT_S = 30.0
# Resident memory growth over one group counted as a blow-up.
BLOWUP_BYTES = 300 << 20
# Accepted-invalid cases allowed in lenient mode only: uniqueItems, which no grammar can
# enforce and which lenient compiles without checking (the grammar's warnings say so).
LENIENT_ALLOWED = frozenset({"uniqueItems.json"})


@functools.lru_cache(maxsize=2)
def suite_remotes(remotes: Path = REMOTES) -> dict[str, Any]:
    """The suite's remote documents by the URI its cases use for them (read once; no
    caller changes them)."""
    return {
        REMOTES_URL + path.relative_to(remotes).as_posix(): json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(remotes.rglob("*.json"))
    }


@dataclass
class Case:
    file: str
    group: str
    description: str
    schema: Any
    data: Any
    valid: bool


@dataclass
class Outcome:
    case: Case
    result: str  # accepted, rejected, refused, crash, timeout
    detail: str = ""


@dataclass
class Counts:
    cases: int = 0
    accepted_valid: int = 0
    rejected_valid: int = 0
    accepted_invalid: int = 0
    rejected_invalid: int = 0
    refused: int = 0
    crashes: int = 0
    timeouts: int = 0
    blowups: int = 0
    compile_s_max: float = 0.0
    failures: list = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.cases += 1
        if o.result == "accepted":
            if o.case.valid:
                self.accepted_valid += 1
            else:
                self.accepted_invalid += 1
        elif o.result == "rejected":
            if o.case.valid:
                self.rejected_valid += 1
            else:
                self.rejected_invalid += 1
        elif o.result == "refused":
            self.refused += 1
        elif o.result == "timeout":
            self.timeouts += 1
        else:
            self.crashes += 1


def load_cases(suite: Path = SUITE) -> list[Case]:
    cases = []
    for path in sorted(suite.glob("*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            for t in group["tests"]:
                cases.append(
                    Case(
                        path.name, group["description"], t["description"], group["schema"], t["data"], bool(t["valid"])
                    )
                )
    return cases


def instance_text(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode("utf-8")


class _Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Timeout()


class MidwordEngine:
    name = "midword"

    def __init__(self, lenient: bool = False, tokenizer: str = "llama3", formats: str = "assert"):
        from midword.engine.grammar import Grammar
        from midword.engine.limits import GrammarError, LimitExceeded
        from midword.engine.matcher import Matcher, MatcherError
        from midword.engine.tokenizer import Tokenizer

        self.lenient = lenient
        self.formats = formats
        self._grammar = Grammar
        self._matcher = Matcher
        self._tok = Tokenizer.from_pretrained(tokenizer)
        self.refusals = (GrammarError, LimitExceeded)
        self.rejections = (MatcherError,)

    def describe(self) -> str:
        options = (", lenient=True" if self.lenient else "") + (f", formats={self.formats!r}")
        return f"midword (Grammar.from_json_schema{options}, documents=the suite's remotes)"

    def compile(self, schema: Any):
        return self._grammar.from_json_schema(
            schema, lenient=self.lenient, formats=self.formats, documents=suite_remotes()
        )

    def accepts(self, compiled, text: bytes) -> bool:
        m = self._matcher(self._tok, compiled)
        m.consume_bytes(text)
        return m.is_accepting()


class LlguidanceEngine:
    name = "llguidance"

    def __init__(self, tokenizer: str = "llama3"):
        from .masks import resolve_tokenizer
        from .peers import LlguidanceAdapter, reference_tokenizer

        spec = resolve_tokenizer(tokenizer)
        self._adapter = LlguidanceAdapter(spec)
        self._ref = reference_tokenizer(spec)
        from .peers import CompileFailed

        self.refusals = (CompileFailed,)
        self.rejections = ()

    def describe(self) -> str:
        return self._adapter.describe()

    def compile(self, schema: Any):
        compiled = self._adapter.compile(schema)
        self._adapter.new_matcher(compiled)  # a grammar error shows here
        return compiled

    def accepts(self, compiled, text: bytes) -> bool:
        m = self._adapter.new_matcher(compiled)
        for token in self._ref.encode(text.decode("utf-8"), add_special_tokens=False).ids:
            if not self._adapter.consume(m, token):
                return False
        return self._adapter.is_accepting(m)


def run_engine(
    engine, cases: list[Case], timeout_s: float = GROUP_TIMEOUT_S, progress: Callable[[str], None] | None = None
) -> tuple[Counts, list[Outcome]]:
    """Every case through `engine`: one compile per schema group, then its instances."""
    counts = Counts()
    outcomes: list[Outcome] = []
    groups: dict[tuple[str, str], list[Case]] = {}
    for c in cases:
        groups.setdefault((c.file, c.group), []).append(c)
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for (file, group), members in groups.items():
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            compiled = None
            refusal = ""
            done: list[Outcome] = []
            try:
                # CPU time: on a shared machine the wall clock says more about the neighbours.
                t = time.process_time()
                try:
                    compiled = engine.compile(members[0].schema)
                except engine.refusals as e:
                    refusal = str(e)
                counts.compile_s_max = max(counts.compile_s_max, time.process_time() - t)
                for c in members:
                    if compiled is None:
                        done.append(Outcome(c, "refused", refusal[:200]))
                        continue
                    try:
                        ok = engine.accepts(compiled, instance_text(c.data))
                    except engine.rejections:
                        ok = False
                    except Exception as e:  # noqa: BLE001 - a crash is counted, with its message
                        done.append(Outcome(c, "crash", f"{type(e).__name__}: {e}"[:200]))
                        continue
                    done.append(Outcome(c, "accepted" if ok else "rejected"))
            except _Timeout:
                seen = {id(o.case) for o in done}
                done += [Outcome(c, "timeout", f"group past {timeout_s:.0f} s") for c in members if id(c) not in seen]
            except Exception as e:  # noqa: BLE001 - a crash in compile, counted per case
                seen = {id(o.case) for o in done}
                done += [Outcome(c, "crash", f"{type(e).__name__}: {e}"[:200]) for c in members if id(c) not in seen]
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss > BLOWUP_BYTES:
                counts.blowups += 1
                counts.failures.append(f"{file} / {group}: resident memory grew past {BLOWUP_BYTES >> 20} MiB")
            for o in done:
                counts.add(o)
                outcomes.append(o)
            if progress is not None:
                progress(f"{file} / {group}")
    finally:
        signal.signal(signal.SIGALRM, old)
    return counts, outcomes


def unexpected(outcomes: list[Outcome], lenient: bool) -> list[Outcome]:
    """What the suite's test fails on: an accepted invalid instance (outside the lenient
    allow-list), a crash or a time-out."""
    bad = []
    for o in outcomes:
        if o.result in ("crash", "timeout"):
            bad.append(o)
        elif o.result == "accepted" and not o.case.valid and not (lenient and o.case.file in LENIENT_ALLOWED):
            bad.append(o)
    return bad


def format_table(results: dict[str, Counts]) -> str:
    rows = [
        ("cases", "cases"),
        ("accepted valid", "accepted_valid"),
        ("rejected valid", "rejected_valid"),
        ("accepted invalid", "accepted_invalid"),
        ("rejected invalid", "rejected_invalid"),
        ("refused (schema)", "refused"),
        ("crashes", "crashes"),
        ("time-outs", "timeouts"),
        ("memory blow-ups", "blowups"),
        ("slowest compile (CPU s)", "compile_s_max"),
    ]
    names = list(results)
    out = [f"{'metric':<22}" + "".join(f"{n:>14}" for n in names), "-" * (22 + 14 * len(names))]
    for label, key in rows:
        cells = []
        for n in names:
            v = getattr(results[n], key)
            cells.append(f"{v:>14.3f}" if isinstance(v, float) else f"{v:>14,}")
        out.append(f"{label:<22}" + "".join(cells))
    return "\n".join(out)


def add_jsts_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", default=str(SUITE), help="folder of draft 2020-12 test files")
    parser.add_argument("--compare", default="llguidance", help="peers beside midword, comma-separated ('' for none)")
    parser.add_argument("--lenient", action="store_true", help="compile uniqueItems without enforcing it")
    parser.add_argument(
        "--formats",
        choices=("assert", "annotation"),
        default="assert",
        help="midword's `format`: enforced (default) or an annotation",
    )
    parser.add_argument("--tokenizer", default="llama3", help="tokenizer for both engines (default llama3)")
    parser.add_argument("--timeout", type=float, default=GROUP_TIMEOUT_S, help="seconds per schema and its cases")
    parser.add_argument("--details", action="store_true", help="list every case midword gets wrong")
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by engine")


def run_jsts(args: argparse.Namespace) -> int:
    cases = load_cases(Path(args.suite))
    engines: list = [MidwordEngine(lenient=args.lenient, tokenizer=args.tokenizer, formats=args.formats)]
    notes = []
    for peer in [p for p in args.compare.split(",") if p]:
        if peer != "llguidance":
            raise SystemExit(f"unknown peer {peer!r} (known: llguidance)")
        try:
            engines.append(LlguidanceEngine(args.tokenizer))
        except Exception as e:  # noqa: BLE001 - a missing peer is reported, not fatal
            notes.append(f"llguidance not run: {e}")
    results: dict[str, Counts] = {}
    wrong: list[Outcome] = []
    for engine in engines:
        counts, outcomes = run_engine(engine, cases, args.timeout)
        results[engine.name] = counts
        if engine.name == "midword":
            wrong = [o for o in outcomes if (o.result == "accepted") != o.case.valid]
    if args.json:
        print(json.dumps({n: {k: v for k, v in asdict(c).items()} for n, c in results.items()}, indent=1))
        return 0
    print(format_table(results))
    print()
    for e in engines:
        print(f"{e.name}: {e.describe()}")
    for n in notes:
        print(n)
    print(f"instances spelled json.dumps(data, ensure_ascii=False); suite: {args.suite}")
    if args.details:
        print("\nmidword, cases not decided as the suite says:")
        for o in wrong:
            print(
                f"  {o.case.file} / {o.case.group} / {o.case.description}: expected "
                f"{'valid' if o.case.valid else 'invalid'}, {o.result}" + (f" ({o.detail})" if o.detail else "")
            )
    return 0
