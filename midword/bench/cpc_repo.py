"""`midword bench cpc --repo PKG`: completions inside a package, with and without its other files.

The repository setting of `midword bench cpc`. Cuts are drawn as for the corpus bench
(a cursor strictly inside an identifier or number, found by `tokenize`), but only in the
modules of one multi-file package (`--repo email`: the standard library's `email/`; or a
directory). The case's document is its module: the text before the cursor (at most
`--context-chars`, from a line start) and the text after the cursor's line (at most
`--context-chars`; the rest of the cursor's line is the truth and is never shown). The
package's other modules are the open documents of the editor, given to the engine as
`ContextChunk(kind="document")` (completion/context.py ranks, deduplicates and cuts them
to `--context-tokens`).

Each case runs in each setting, one after the other (so load on the machine hits every
setting alike):

- `off`: the document only, as the LSP server did before workspace context;
- `on`: the document and the other modules as context;
- `suffix` (with `--suffix`): the document with the text after the cursor shown before it
  (`CompletionEngine.suffix_context`), no other modules: for models without FIM.

Metrics per setting and mode: `em_word` and `em_line` as in `midword bench cpc`, the
prompt's tokens (`prompt`) and how many of them are context (`context`), and the latency
of one completion (p50, p95; before each, the engine completes the document up to the
start of the cursor's line, so the KV cache holds the prompt up to there, as after
moving to a new line; the context is part of that prompt).
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from midword.bench.cpc import (
    BenchError,
    Case,
    _read_source,
    line_match,
    load_engine,
    percentile,
    word_match,
    word_spans,
)

SETTINGS = ("off", "on", "suffix")
DEFAULT_MODES = "naive,cpc"


@dataclass(frozen=True)
class RepoCase:
    case: Case
    path: str  # the module's path in the package, e.g. "email/utils.py"
    suffix: str  # text after the cursor's line


def package_root(name: str) -> Path:
    """A directory, or the name of a standard-library package."""
    p = Path(name)
    if p.is_dir():
        return p
    import sysconfig

    p = Path(sysconfig.get_paths()["stdlib"]) / name
    if p.is_dir():
        return p
    raise BenchError(f"--repo {name}: neither a directory nor a standard-library package")


def package_files(root: Path) -> dict[str, str]:
    """{path relative to the package's parent: text} of the package's Python modules."""
    files = {}
    for f in sorted(root.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        text = _read_source(f)
        if text:
            files[f.relative_to(root.parent).as_posix()] = text
    if len(files) < 2:
        raise BenchError(f"--repo {root}: needs a package of two or more modules, found {len(files)}")
    return files


def sample_cases(
    files: dict[str, str], n: int, seed: int = 0, module: str | None = None, context_chars: int = 2000
) -> list[RepoCase]:
    """`n` distinct cuts: a module uniformly, then a word in it, then a cursor inside it."""
    names = [m for m in files if module is None or m == module or m.endswith("/" + module)]
    if not names:
        raise BenchError(f"--repo-module {module}: not a module of the package (have {', '.join(files)})")
    spans = {m: word_spans(files[m]) for m in names}
    names = [m for m in names if spans[m]]
    if not names:
        raise BenchError("no words to cut in the chosen modules")
    rng = random.Random(seed)
    seen, out, misses = set(), [], 0
    while len(out) < n and misses < 10_000:
        m = names[rng.randrange(len(names))]
        s, e = spans[m][rng.randrange(len(spans[m]))]
        cut = rng.randrange(s + 1, e)
        if (m, cut) in seen:
            misses += 1
            continue
        seen.add((m, cut))
        text = files[m]
        start = max(0, cut - context_chars)
        if start > 0:
            nl = text.find("\n", start, cut)
            start = nl + 1 if nl >= 0 else start
        end = text.find("\n", cut)
        truth = text[cut:]
        suffix = "" if end < 0 else text[end + 1 : end + 1 + context_chars]
        line = text.count("\n", 0, cut) + 1
        case = Case(
            name=f"{m}:{line}:{cut - text.rfind(chr(10), 0, cut) - 1}",
            prefix=text[start:cut],
            suffix="",
            truth=truth,
            line_truth=truth.split("\n", 1)[0],
        )
        out.append(RepoCase(case, m, suffix))
    return out


def _request(
    rc: RepoCase,
    setting: str,
    mode: str,
    files: dict[str, str],
    args,
    prefix: str | None = None,
    max_tokens: int | None = None,
):
    from midword.completion.types import CompletionRequest, GrammarSpec

    context = _other_modules(files, rc) if setting == "on" else ()
    return CompletionRequest(
        prefix=rc.case.prefix if prefix is None else prefix,
        suffix=rc.suffix,
        language="python",
        grammar=GrammarSpec(kind="none"),
        max_tokens=args.max_tokens if max_tokens is None else max_tokens,
        temperature=0.0,
        mode=mode,
        single_line=True,
        time_budget_s=args.time_budget,
        context=context,
        context_tokens=args.context_tokens,
        path=rc.path,
    )


def _other_modules(files: dict[str, str], rc: RepoCase):
    from midword.completion.types import ContextChunk

    return tuple(
        ContextChunk(text, path=p, kind="document")
        for p, text in files.items()
        if p != rc.path and same_package(p, rc.path)
    )


def coverage(tokenizer, files: dict[str, str], cases: list[RepoCase], budget: int) -> dict:
    """The context's ranking alone, no model: for how many cuts the word being completed
    (the typed part and the rest of the identifier) is written in the document above the
    cursor, only in the package's other modules, and in the context chosen for the cut."""
    import re

    from midword.completion.context import select

    out = {"cases": len(cases), "in_document": 0, "in_other_modules": 0, "in_context": 0, "context_tokens": 0.0}
    for rc in cases:
        typed = rc.case.typed_word
        word = re.compile(r"\b" + re.escape(typed + re.match(r"[A-Za-z0-9_]*", rc.case.truth).group(0)) + r"\b")
        chunks = _other_modules(files, rc)
        pieces, tokens = select(
            tokenizer, chunks, prefix=rc.case.prefix, suffix=rc.suffix, budget=budget, path=rc.path, language="python"
        )
        out["context_tokens"] += len(tokens) / max(1, len(cases))
        if word.search(rc.case.prefix[: len(rc.case.prefix) - len(typed)]):
            out["in_document"] += 1
        elif any(word.search(c.text) for c in chunks):
            out["in_other_modules"] += 1
            out["in_context"] += any(word.search(p.text) for p in pieces)
    return out


def run_case(engine, rc: RepoCase, settings, modes, files, args) -> dict:
    out = {}
    line_start = rc.case.prefix.rfind("\n") + 1
    for setting in settings:
        engine.suffix_context = setting == "suffix"
        try:
            for mode in modes:
                # the KV cache holds the prompt up to the cursor's line, context included
                engine.complete(
                    _request(rc, setting, "naive", files, args, prefix=rc.case.prefix[:line_start], max_tokens=1)
                )
                t0 = time.perf_counter()
                c = engine.complete(_request(rc, setting, mode, files, args))
                ms = (time.perf_counter() - t0) * 1e3
                inserted = c.insert_text(rc.case.prefix)
                out[(setting, mode)] = {
                    "inserted": inserted,
                    "em_word": word_match(rc.case, inserted),
                    "em_line": line_match(rc.case, inserted),
                    "latency_ms": ms,
                    "prompt": c.timings.prompt_tokens,
                    "context": c.timings.context_tokens,
                }
        finally:
            engine.suffix_context = False
    return out


def summarize(records: list[dict], settings, modes) -> dict:
    table = {}
    for setting in settings:
        for mode in modes:
            rs = [r[(setting, mode)] for r in records]
            lat = [r["latency_ms"] for r in rs]
            n = len(rs)
            table[f"{setting}/{mode}"] = {
                "em_word": sum(r["em_word"] for r in rs) / n,
                "em_line": sum(r["em_line"] for r in rs) / n,
                "prompt": sum(r["prompt"] for r in rs) / n,
                "context": sum(r["context"] for r in rs) / n,
                "latency_p50_ms": percentile(lat, 50),
                "latency_p95_ms": percentile(lat, 95),
            }
    return table


def format_table(table: dict) -> str:
    lines = [
        (f"{'setting/mode':<14} {'em_word':>8} {'em_line':>8} {'prompt':>7} {'context':>8} {'p50 ms':>8} {'p95 ms':>8}")
    ]
    for key, s in table.items():
        lines.append(
            f"{key:<14} {s['em_word']:>8.3f} {s['em_line']:>8.3f} {s['prompt']:>7.0f} {s['context']:>8.0f} "
            f"{s['latency_p50_ms']:>8.0f} {s['latency_p95_ms']:>8.0f}"
        )
    return "\n".join(lines)


def add_repo_arguments(parser) -> None:
    from midword.completion.types import DEFAULT_CONTEXT_TOKENS

    parser.add_argument(
        "--repo",
        metavar="PKG",
        help="repository setting: cut the modules of PKG (a standard-library package such as "
        "email, json, asyncio, or a package directory; several, comma-separated, share --limit) "
        "with the package's other modules as context",
    )
    parser.add_argument("--repo-module", metavar="NAME", help="with --repo: cut only this module")
    parser.add_argument(
        "--context-tokens",
        type=int,
        default=DEFAULT_CONTEXT_TOKENS,
        help=f"with --repo: context budget in tokens (default {DEFAULT_CONTEXT_TOKENS})",
    )
    parser.add_argument(
        "--coverage",
        action="store_true",
        help="with --repo: rank the context only, no model: how often the chosen context holds the "
        "word being completed (tokenizer of --model)",
    )
    parser.add_argument(
        "--suffix",
        action="store_true",
        help="with --repo: also the `suffix` setting (text after the cursor before the document)",
    )


def repo_cases(args) -> tuple[list[Path], dict[str, str], list[RepoCase]]:
    """The packages of `--repo A,B,...`, their files ({path under the package's parent: text},
    all packages together) and `--limit` cuts shared out evenly among the packages."""
    names = [n.strip() for n in args.repo.split(",") if n.strip()]
    if not names:
        raise BenchError(f"--repo: no package named in {args.repo!r}")
    roots = [package_root(n) for n in names]
    tops = [r.name for r in roots]
    if len(set(tops)) != len(tops):
        raise BenchError(f"--repo {args.repo}: two packages share a name")
    files: dict[str, str] = {}
    cases: list[RepoCase] = []
    for k, root in enumerate(roots):
        pkg = package_files(root)
        files.update(pkg)
        n = args.limit // len(roots) + (1 if k < args.limit % len(roots) else 0)
        if n:
            cases.extend(sample_cases(pkg, n, args.seed, args.repo_module, args.context_chars))
    return roots, files, cases


def same_package(a: str, b: str) -> bool:
    return a.split("/", 1)[0] == b.split("/", 1)[0]


def run_repo(args, *, engine=None) -> int:
    """`midword bench cpc --repo PKG`; `engine` replaces the model named by `--model` (tests)."""
    try:
        modes = tuple(
            m.strip() for m in (args.modes if args.modes != _all_modes() else DEFAULT_MODES).split(",") if m.strip()
        )
        bad = [m for m in modes if m not in ("naive", "heal1", "align", "cpc")]
        if bad or not modes:
            raise BenchError(f"--modes: with --repo, some of naive, heal1, align, cpc (got {args.modes!r})")
        if args.limit < 1:
            raise BenchError(f"--limit must be positive, not {args.limit}")
        if args.context_tokens < 1:
            raise BenchError(f"--context-tokens must be positive, not {args.context_tokens}")
        roots, files, cases = repo_cases(args)
    except BenchError as err:
        print(f"midword bench cpc: {err}", file=sys.stderr)
        return 2
    if args.coverage:
        return _run_coverage(args, roots, files, cases)
    if engine is None:
        engine = load_engine(args)
        if engine is None:
            return 2
    settings = SETTINGS if args.suffix else SETTINGS[:2]
    records = []
    dump = open(args.dump, "w", encoding="utf-8") if args.dump else None  # noqa: SIM115 - closed below
    try:
        for k, rc in enumerate(cases, 1):
            res = run_case(engine, rc, settings, modes, files, args)
            records.append(res)
            if dump is not None:
                dump.write(
                    json.dumps(
                        {
                            "name": rc.case.name,
                            "truth_line": rc.case.line_truth,
                            **{f"{s}/{m}": r for (s, m), r in res.items()},
                        },
                        ensure_ascii=False,
                    )
                    + "\n"
                )
                dump.flush()
            if not args.quiet:
                marks = " ".join(
                    f"{s}/{m}:{'W' if r['em_word'] else '-'}{'L' if r['em_line'] else '-'}" for (s, m), r in res.items()
                )
                print(f"[{k}/{len(cases)}] {rc.case.name} {rc.case.typed_word}|  {marks}", file=sys.stderr, flush=True)
    finally:
        if dump is not None:
            dump.close()
    table = summarize(records, settings, modes)
    if args.json:
        print(
            json.dumps(
                {"cases": len(records), "packages": [str(r) for r in roots], "settings": table},
                indent=2,
            )
        )
    else:
        print(
            f"repository setting: {len(records)} cuts in {', '.join(map(str, roots))} (seed {args.seed}), the "
            f"package's other modules as context up to {args.context_tokens} tokens; model {args.model}, greedy, "
            f"single line, at most {args.max_tokens} tokens, no grammar"
        )
        print(format_table(table))
    return 0


def _run_coverage(args, roots, files, cases) -> int:
    from midword.engine import Tokenizer

    try:
        tokenizer = Tokenizer.from_pretrained(args.model)
    except Exception as err:
        print(f"midword bench cpc: --model {args.model}: cannot load its tokenizer: {err}", file=sys.stderr)
        return 2
    cov = coverage(tokenizer, files, cases, args.context_tokens)
    if args.json:
        print(json.dumps({"packages": [str(r) for r in roots], **cov}, indent=2))
    else:
        print(
            f"context coverage: {cov['cases']} cuts in {', '.join(map(str, roots))} (seed {args.seed}), "
            f"{args.context_tokens}-token budget, tokenizer {args.model}\n"
            f"  word above the cursor in the document: {cov['in_document']}\n"
            f"  word only in the package's other modules: {cov['in_other_modules']}, "
            f"of which in the chosen context: {cov['in_context']}\n"
            f"  context tokens per cut: {cov['context_tokens']:.0f}"
        )
    return 0


def _all_modes() -> str:
    from midword.bench.cpc import ALL_MODES

    return ",".join(ALL_MODES)
