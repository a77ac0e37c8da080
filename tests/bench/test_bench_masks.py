"""Tests for the MaskBench harness (midword.bench.masks / peers).

The bookkeeping (pass/fail, forced-token counting, mismatches, timeouts) is checked with
a toy engine whose grammar is an explicit set of token sequences, so every expected
number can be worked out by hand. The real peers and midword then run over the first
dev files through the same command-line path.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from midword.bench.masks import (
    BenchInputError,
    Case,
    EngineRunner,
    EngineStats,
    FileResult,
    Instance,
    add_masks_arguments,
    format_table,
    list_files,
    load_case,
    reason_key,
    resolve_tokenizer,
    run_file,
    run_masks,
    same_files,
)
from midword.bench.peers import CompileFailed, EngineAdapter, TokenizerSpec, token_allowed

DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "maskbench-dev"

EOS = 63
VOCAB = 64

REQUIRED_KEYS = {
    "files",
    "passed",
    "compile_errors",
    "accepted_invalid",
    "masks",
    "tbm_avg_us",
    "tbm_p50_us",
    "tbm_p99_us",
    "tbm_max_us",
    "ttfm_p50_us",
    "ttfm_p90_us",
    "ff_share",
    "ff_noncanonical",
}


class SequenceEngine(EngineAdapter):
    """A grammar that is an explicit set of token sequences (a dict schema: any sequence).

    Schema "bad" fails to compile, "boom" raises a plain exception, "sleep" sleeps in the
    compile (where no between-token check can stop it), "die" kills the process.
    Knobs inject the bugs the harness must catch.
    """

    name = "sequences"

    def __init__(self, spec=None, *, wrong_ff=None, lying_mask=False, mask_delay=0.0, no_ff=False):
        self.wrong_ff = wrong_ff  # (position, token): report this forced token there
        self.lying_mask = lying_mask  # mask allows every token; consume still checks
        self.mask_delay = mask_delay
        self.no_ff = no_ff

    def describe(self):
        return "toy sequence engine"

    def compile(self, schema):
        if schema == "bad":
            raise CompileFailed("unsupported keyword 'if' at /properties/a")
        if schema == "boom":
            raise KeyError("internal table")
        if schema == "sleep":
            time.sleep(60)
        if schema == "die":
            os._exit(3)
        if isinstance(schema, dict):
            return None
        return [tuple(s) for s in schema]

    def new_matcher(self, compiled):
        return {"seqs": compiled, "prefix": ()}

    def _allowed(self, m):
        seqs, prefix = m["seqs"], m["prefix"]
        if seqs is None:
            return set(range(VOCAB))
        out = {s[len(prefix)] for s in seqs if s[: len(prefix)] == prefix and len(s) > len(prefix)}
        if prefix in seqs:
            out.add(EOS)
        return out

    def fill_mask(self, m):
        if self.mask_delay:
            time.sleep(self.mask_delay)
        mask = np.zeros(VOCAB // 32, dtype=np.uint32)
        for t in range(VOCAB) if self.lying_mask else self._allowed(m):
            mask[t >> 5] |= np.uint32(1 << (t & 31))
        return mask

    def consume(self, m, token):
        if token == EOS or token not in self._allowed(m):
            return False
        m["prefix"] += (token,)
        return True

    def is_accepting(self, m):
        return m["seqs"] is None or m["prefix"] in m["seqs"]

    def ff_tokens(self, m):
        if self.no_ff:
            return None
        if self.wrong_ff and len(m["prefix"]) == self.wrong_ff[0]:
            return [self.wrong_ff[1]]
        probe = {"seqs": m["seqs"], "prefix": m["prefix"]}
        forced = []
        while m["seqs"] is not None:
            allowed = self._allowed(probe)
            if len(allowed) != 1 or EOS in allowed:
                break
            (t,) = allowed
            forced.append(t)
            probe["prefix"] += (t,)
        return forced


def inst(valid, tokens):
    text = "".join(chr(ord("a") + t % 26) for t in tokens)
    return Instance(valid, text, list(tokens), list(range(len(tokens))))


def case(schema, *instances, total=None):
    return Case("toy.json", schema, list(instances), total if total is not None else len(instances))


# ---------------------------------------------------------------------------------------
# One file through the toy engine


def test_token_allowed_reads_little_endian_bits():
    mask = np.zeros(3, dtype=np.uint32)
    mask[1] = np.uint32(1 << 31)
    assert token_allowed(mask, 63)
    assert not token_allowed(mask, 62)
    assert not token_allowed(mask, 32 * 3)  # past the end of the mask
    assert not token_allowed(mask, -1)


def test_valid_accepted_and_invalid_rejected_pass():
    c = case([[1, 2, 3]], inst(True, [1, 2, 3]), inst(False, [1, 2]), inst(False, [1, 4]))
    r = run_file(SequenceEngine(), c, [EOS])
    assert r.passed and r.status == "ok"
    assert (r.valid_tests, r.invalid_tests, r.rejected_valid, r.accepted_invalid) == (1, 2, 0, 0)
    # One TTFM per instance; masks: the valid one 3 positions + end, [1,2] 2 + end, [1,4] 2.
    assert len(r.ttfm_ns) == 3
    assert len(r.tbm_ns) == 4 + 3 + 2
    assert r.mismatches == 0


def test_compile_once_per_file_gives_one_ttfm_sample():
    c = case([[1, 2, 3]], inst(True, [1, 2, 3]), inst(False, [1, 2]), inst(False, [1, 4]))
    r = run_file(SequenceEngine(), c, [EOS], compile_per="file")
    assert r.passed and len(r.ttfm_ns) == 1
    assert len(r.tbm_ns) == 4 + 3 + 2  # the same masks as compiling per instance


@pytest.mark.parametrize("compile_per", ["file", "test"])
def test_each_file_ends_with_its_compiled_grammar_released(compile_per):
    ended = []

    class Ending(SequenceEngine):
        def end_file(self, compiled):
            ended.append(compiled)

    c = case([[1, 2, 3]], inst(True, [1, 2, 3]), inst(False, [1, 2]))
    r = run_file(Ending(), c, [EOS], compile_per=compile_per)
    assert r.passed and len(ended) == 1 and ended[0] == Ending().compile([[1, 2, 3]])
    run_file(Ending(), case("bad", inst(True, [1])), [EOS])  # compile error: nothing to end
    assert len(ended) == 1


def test_permissive_engine_accepting_invalid_fails_the_file():
    c = case([[1, 2], [1, 3]], inst(True, [1, 2]), inst(False, [1, 3]))
    r = run_file(SequenceEngine(), c, [EOS])
    assert r.accepted_invalid == 1 and not r.passed
    assert "test 1 (invalid) accepted" in r.failures[0]


def test_rejected_valid_names_the_token():
    c = case([[1, 2, 3]], inst(True, [1, 5, 3]))
    r = run_file(SequenceEngine(), c, [EOS])
    assert r.rejected_valid == 1 and not r.passed
    assert "token 1" in r.failures[0] and "not in the mask" in r.failures[0]


def test_incomplete_valid_text_is_rejected_at_the_end():
    c = case([[1, 2, 3]], inst(True, [1, 2]))
    r = run_file(SequenceEngine(), c, [EOS])
    assert r.rejected_valid == 1
    assert "complete=False" in r.failures[0]


def test_forced_tokens_counted_once_per_run_of_positions():
    # One sequence: everything is forced at position 0, then nothing is asked again.
    r = run_file(SequenceEngine(), case([[1, 2, 3, 4]], inst(True, [1, 2, 3, 4])), [EOS])
    assert (r.ff_forced, r.ff_calls, r.ff_noncanonical, r.valid_tokens) == (4, 1, 0, 4)
    assert len(r.tbm_ns) == 5  # masks are still computed at every position
    # A branch after the first token: [1] forced, a free choice, then [3] forced.
    r = run_file(SequenceEngine(), case([[1, 2, 3], [1, 5, 6]], inst(True, [1, 2, 3])), [EOS])
    assert (r.ff_forced, r.ff_calls, r.ff_noncanonical) == (2, 3, 0)


def test_noncanonical_forced_token_is_counted():
    engine = SequenceEngine(wrong_ff=(1, 9))
    r = run_file(engine, case([[1, 2, 3], [1, 5, 6]], inst(True, [1, 2, 3])), [EOS])
    assert r.ff_noncanonical == 1
    assert r.ff_forced == 3  # [1], the wrong [9], then [3]


def test_forced_tokens_are_not_asked_on_invalid_instances():
    r = run_file(SequenceEngine(), case([[1, 2]], inst(False, [1, 3])), [EOS])
    assert r.ff_calls == 0 and r.valid_tokens == 0


def test_engine_without_forced_tokens_reports_none():
    r = run_file(SequenceEngine(no_ff=True), case([[1, 2]], inst(True, [1, 2])), [EOS])
    assert not r.ff_supported
    s = EngineStats("toy")
    s.add(r)
    assert s.summary()["ff_share"] is None


def test_mask_that_disagrees_with_consume_is_a_mismatch():
    r = run_file(SequenceEngine(lying_mask=True), case([[1, 2]], inst(False, [1, 7])), [EOS])
    assert r.mismatches == 1 and r.passed  # still rejected, but the disagreement shows
    r = run_file(SequenceEngine(lying_mask=True), case([[1, 2]], inst(True, [1, 7])), [EOS])
    assert r.rejected_valid == 1 and "consume refused" in r.failures[0]


def test_compile_error_and_engine_exception_are_reported_not_raised():
    r = run_file(SequenceEngine(), case("bad", inst(True, [1])), [EOS])
    assert r.status == "compile_error" and "unsupported keyword" in r.reason and not r.passed
    r = run_file(SequenceEngine(), case("boom", inst(True, [1])), [EOS])
    assert r.status == "error" and r.reason.startswith("KeyError")


def test_file_without_instances_is_still_compiled():
    r = run_file(SequenceEngine(), case("bad"), [EOS])
    assert r.status == "compile_error"
    r = run_file(SequenceEngine(), case([[1]]), [EOS])
    assert r.passed and len(r.ttfm_ns) == 1


def test_time_limit_stops_between_tokens():
    long = list(range(1, 40))
    r = run_file(SequenceEngine(mask_delay=0.01), case([long], inst(True, long)), [EOS], time_limit_s=0.05)
    assert r.status == "timeout" and not r.passed
    assert r.wall_s < 1.0


# ---------------------------------------------------------------------------------------
# Aggregation, report, inputs


def test_reason_key_groups_by_cause_not_place():
    a = reason_key("unsupported keyword 'if' at /properties/a")
    b = reason_key("unsupported keyword 'if' at /definitions/x/then")
    assert a == b == "unsupported keyword 'if'"
    assert reason_key("limit max_lexer_states=200000 exceeded: in /a") == "limit max_lexer_states=N exceeded"
    assert reason_key("MatcherError: LimitExceeded: limit lexer_fuel=2000000 exceeded: at x") == (
        "limit lexer_fuel=N exceeded"
    )
    assert reason_key("KeyError: 'table'") == "KeyError"
    assert reason_key('Unimplemented keys: ["if", "then"]') == 'Unimplemented keys: ["if", "then"]'
    assert reason_key("Unknown format: regex") == "Unknown format: regex"
    assert reason_key("oneOf constraints are not supported. Enable 'coerce_one_of'") == (
        "oneOf constraints are not supported"
    )
    assert reason_key("[02:37:44] /project/cpp/regex_converter.cc:32: The regex must not contain nulls") == (
        "The regex must not contain nulls"
    )
    assert reason_key("") == "(no message)"


def _stats(engine, tbm_us, ttfm_us, **kw):
    s = EngineStats(engine)
    s.add(
        FileResult(
            file="a.json",
            tbm_ns=[int(t * 1000) for t in tbm_us],
            ttfm_ns=[int(t * 1000) for t in ttfm_us],
            tests_run=1,
            valid_tests=1,
            valid_tokens=10,
            ff_forced=2,
            **kw,
        )
    )
    s.add(FileResult(file="b.json", status="compile_error", reason="unsupported keyword 'x' at /a"))
    return s.summary()


def test_summary_figures():
    s = _stats("midword", [10, 20, 30, 40], [100, 300])
    assert REQUIRED_KEYS <= set(s)
    assert (s["files"], s["passed"], s["compile_errors"], s["masks"]) == (2, 1, 1, 4)
    assert s["tbm_avg_us"] == 25.0 and s["tbm_max_us"] == 40.0 and s["tbm_p50_us"] == 25.0
    assert s["ttfm_p50_us"] == 200.0
    assert s["ff_share"] == pytest.approx(0.2)
    assert s["compile_error_reasons"] == [("unsupported keyword 'x'", 1)]


def test_table_has_engines_side_by_side_and_ratios():
    table = format_table(
        {
            "midword": _stats("midword", [10, 20], [100]),
            "llguidance": _stats("llguidance", [5, 10], [50]),
        }
    )
    header = table.splitlines()[0].split()
    assert header == ["metric", "midword", "llguidance", "midword/llguidance"]
    avg = next(line for line in table.splitlines() if line.startswith("TBM avg"))
    assert avg.split()[-1] == "2.00x"
    assert "unsupported keyword 'x'" in table


def test_ratios_again_over_the_files_every_engine_ran():
    mine, theirs = EngineStats("midword"), EngineStats("llguidance")
    mine.add(FileResult(file="x.json", tbm_ns=[1000, 3000], ttfm_ns=[5000]))
    mine.add(FileResult(file="y.json", tbm_ns=[100_000], ttfm_ns=[9000]))
    mine.add(FileResult(file="z.json", tbm_ns=[7000], ttfm_ns=[7000]))
    theirs.add(FileResult(file="x.json", tbm_ns=[2000], ttfm_ns=[4000]))
    theirs.add(FileResult(file="y.json", status="compile_error", reason="oneOf constraints are not supported"))
    theirs.add(FileResult(file="z.json", status="timeout", reason="after 1 of 3 instances", tbm_ns=[1000]))
    common = same_files({"midword": mine, "llguidance": theirs})
    assert common == {"x.json"}
    assert same_files({"midword": mine}) is None
    t = mine.timings(common)
    assert (t["files"], t["masks"], t["tbm_avg_us"], t["tbm_max_us"], t["ttfm_p50_us"]) == (1, 2, 2.0, 3.0, 5.0)
    summaries = {
        name: {**s.summary(), "same_files": s.timings(common)}
        for name, s in (("midword", mine), ("llguidance", theirs))
    }
    table = format_table(summaries)
    everything, same = table.split("Same instances", 1)

    def ratio(block, label):
        return next(line for line in block.splitlines() if line.startswith(label)).split()[-1]

    # All files: the masks of y.json, which llguidance refused, and of z.json, where it
    # stopped early, weigh in.
    assert ratio(everything, "TBM avg") == "18.50x"
    assert ratio(same, "TBM avg") == "1.00x"
    assert ratio(same, "TTFM p50") == "1.25x"
    # Without peers there is nothing to line up.
    assert "Same instances" not in format_table({"midword": mine.summary()})


def test_list_files_sorted_and_limited(tmp_path):
    for name in ("b.json", "a.json", "c.txt", "c.json"):
        (tmp_path / name).write_text("{}")
    assert [f.name for f in list_files([str(tmp_path)])] == ["a.json", "b.json", "c.json"]
    assert [f.name for f in list_files([str(tmp_path)], limit=2)] == ["a.json", "b.json"]
    with pytest.raises(BenchInputError, match="nope"):
        list_files([str(tmp_path / "nope")])


def test_a_sample_outside_a_dev_set_is_the_same_draw_everywhere(tmp_path):
    # `--sample N --seed S --exclude DEV`: files outside the development set, drawn so that
    # a figure in docs/benchmarks.md is one command on any machine.
    data, dev = tmp_path / "data", tmp_path / "dev"
    data.mkdir()
    dev.mkdir()
    for i in range(40):
        (data / f"f{i:02d}.json").write_text("{}")
    for i in range(0, 40, 4):
        (dev / f"f{i:02d}.json").write_text("{}")
    picked = list_files([str(data)], sample=12, seed=5, exclude=[str(dev)])
    names = [f.name for f in picked]
    assert len(names) == 12 and names == sorted(names)
    assert not {f.name for f in dev.iterdir()} & set(names)
    assert names == [f.name for f in list_files([str(data)], sample=12, seed=5, exclude=[str(dev)])]
    assert names != [f.name for f in list_files([str(data)], sample=12, seed=6, exclude=[str(dev)])]
    # A sample larger than what is left takes it all; --limit applies after the draw.
    assert len(list_files([str(data)], sample=100, exclude=[str(dev)])) == 30
    assert [f.name for f in list_files([str(data)], limit=3, sample=12, seed=5, exclude=[str(dev)])] == names[:3]
    with pytest.raises(BenchInputError, match="--sample 0"):
        list_files([str(data)], sample=0)


@pytest.fixture(scope="module")
def spec():
    return resolve_tokenizer("llama3")


@pytest.fixture(scope="module")
def reference(spec):
    from midword.bench.peers import reference_tokenizer

    return reference_tokenizer(spec)


def test_resolve_llama3(spec):
    assert spec.path.endswith("tokenizer.json") and Path(spec.path).is_file()
    assert spec.eos_ids
    with pytest.raises(BenchInputError, match="no-such-tokenizer"):
        resolve_tokenizer("no-such-tokenizer")


def test_resolve_gemma3_uses_the_converted_vocabulary():
    from midword.bench.masks import MidwordAdapter
    from midword.bench.peers import reference_tokenizer
    from midword.engine.tokenizer import Tokenizer

    spec = resolve_tokenizer("gemma3")
    tok = Tokenizer.from_pretrained("gemma3")
    # the tokenizer.json converted from the GGUF, with Gemma's own end tokens ("<eos>", not
    # the ordinary "</s>" token its vocabulary also has)
    assert spec.path == tok.tokenizer_file and Path(spec.path).is_file()
    assert spec.eos_ids == tuple(sorted(tok.eos_token_ids)) and 1 in spec.eos_ids
    adapter = MidwordAdapter(spec)
    text = '{"name": "warm up", "n": 12}'
    assert adapter.encode(text) == reference_tokenizer(spec).encode(text, add_special_tokens=False).ids


def test_load_case_tokenizes_json_dumps(tmp_path, reference):
    data = {"naïve": [1, 2.5, None], "b": "x y"}
    f = tmp_path / "t.json"
    f.write_text(
        json.dumps(
            {"schema": {"type": "object"}, "tests": [{"data": data, "valid": True}, {"data": 3, "valid": False}]}
        )
    )
    c = load_case(f, reference)
    text = json.dumps(data, ensure_ascii=False)
    assert c.instances[0].text == text and "ï" in text
    assert reference.decode(c.instances[0].tokens) == text
    assert [i.valid for i in c.instances] == [True, False] and c.total_tests == 2
    assert len(load_case(f, reference, max_tests=1).instances) == 1
    f.write_text(json.dumps({"schema": {}, "tests": [{"data": 1}]}))
    with pytest.raises(BenchInputError, match=r"t\.json: tests\[0\]"):
        load_case(f, reference)
    f.write_text("{not json")
    with pytest.raises(BenchInputError, match="t.json"):
        load_case(f, reference)


# ---------------------------------------------------------------------------------------
# Worker processes: a stuck engine is killed, a crashed one restarted


class SleepyEngine(SequenceEngine):
    pass


def test_worker_kill_on_hang_and_restart_after_crash(spec):
    toy_spec = TokenizerSpec(spec.name, spec.path, (EOS,))
    warmup = case({"type": "object"}, inst(True, [1, 2]))
    runner = EngineRunner(f"{__name__}:SleepyEngine", toy_spec, warmup, grace_s=0.5)
    try:
        runner.start()
        assert "toy" in runner.description
        r = runner.run(case("sleep", inst(True, [1])), time_limit_s=0.2)
        assert r.status == "timeout" and "killed" in r.reason
        r = runner.run(case("die", inst(True, [1])), time_limit_s=5)
        assert r.status == "crash" and "exit code 3" in r.reason
        r = runner.run(case([[1, 2]], inst(True, [1, 2])), time_limit_s=5)
        assert r.passed
        assert runner.restarts == 2
    finally:
        runner.close()


# ---------------------------------------------------------------------------------------
# Real engines over the first dev files, through the command-line path


def _run_cli(capsys, *argv):
    parser = argparse.ArgumentParser()
    add_masks_arguments(parser)
    rc = run_masks(parser.parse_args([str(DEV), "--tokenizer", "llama3", "--json", *argv]))
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def _check_sane(s, files):
    assert REQUIRED_KEYS <= set(s)
    assert s["files"] == files
    assert 0 <= s["passed"] <= s["files"]
    assert s["masks"] > 0
    assert 0 < s["tbm_p50_us"] <= s["tbm_p99_us"] <= s["tbm_max_us"]
    assert s["ttfm_p50_us"] <= s["ttfm_p90_us"]
    assert s["crashes"] == 0 and s["timeouts"] == 0


@pytest.mark.skipif(not DEV.is_dir(), reason="needs ../shared/data/maskbench-dev")
def test_peers_on_first_dev_files(capsys):
    pytest.importorskip("llguidance")
    pytest.importorskip("xgrammar")
    result = _run_cli(capsys, "--engines", "llguidance,xgrammar", "--limit", "5")
    assert set(result) == {"llguidance", "xgrammar"}
    for name, s in result.items():
        _check_sane(s, 5)
        assert s["passed"] >= 4, (name, s["failed_files"])
        assert s["mask_mismatches"] == 0
    llg = result["llguidance"]
    # llguidance heals the end of its forced tokens, so they match the canonical ones.
    assert llg["ff_share"] > 0 and llg["ff_noncanonical"] == 0


@pytest.mark.skipif(not DEV.is_dir(), reason="needs ../shared/data/maskbench-dev")
def test_midword_on_first_dev_files(capsys):
    pytest.importorskip("midword.engine.matcher")
    pytest.importorskip("midword.engine.tokenizer")
    result = _run_cli(capsys, "--engines", "midword", "--limit", "5")
    assert set(result) == {"midword"}, "midword did not start (see the note on stderr)"
    s = result["midword"]
    _check_sane(s, 5)
    assert s["passed"] >= 4, s["failed_files"]
    assert s["mask_mismatches"] == 0
    assert s["ff_share"] is not None and s["ff_noncanonical"] == 0


@pytest.mark.slow
def test_start_bench_times_each_stage_in_new_processes(capsys):
    import argparse
    import json

    from midword.bench.start import STAGES, add_start_arguments, run_start_bench

    parser = argparse.ArgumentParser()
    add_start_arguments(parser)
    assert run_start_bench(parser.parse_args(["--warm", "1", "--json"])) == 0
    runs = json.loads(capsys.readouterr().out)
    assert set(runs) == {"cold", "warm 1"}
    for timings in runs.values():
        assert set(timings) == set(STAGES)
        assert all(v > 0 for v in timings.values())
        assert abs(sum(timings[s] for s in STAGES[:-1]) - timings["total"]) < 0.05


@pytest.mark.skipif(not DEV.is_dir(), reason="needs ../shared/data/maskbench-dev")
def test_engines_take_turns_running_first_with_quiet_thread_pools(monkeypatch, capsys):
    import midword.bench.masks as mb

    runs: list[tuple[str, str]] = []
    seen_env: list[dict] = []

    class RecordingRunner:
        def __init__(self, engine, spec, warmup, **kw):
            self.engine, self.description, self.restarts = engine, engine, 0

        def start(self):
            seen_env.append({k: os.environ.get(k) for k in mb.QUIET_THREAD_POOLS})

        def run(self, case, limit, compile_per="test"):
            runs.append((case.name, self.engine))
            return FileResult(file=case.name, tests_total=case.total_tests)

        def close(self):
            pass

    monkeypatch.setattr(mb, "EngineRunner", RecordingRunner)
    monkeypatch.setenv("RAYON_NUM_THREADS", "3")  # set by the user: kept
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # restored after the test
    result = _run_cli(capsys, "--engines", "midword,llguidance", "--limit", "4")
    firsts = [engine for i, (_, engine) in enumerate(runs) if i % 2 == 0]
    assert firsts == ["midword", "llguidance", "midword", "llguidance"]
    assert [name for name, _ in runs[::2]] == [name for name, _ in runs[1::2]]  # both ran every file
    assert seen_env[0]["RAYON_NUM_THREADS"] == "3" and seen_env[0]["TOKENIZERS_PARALLELISM"] == "false"
    steal = result["midword"]["cpu_steal"]
    assert steal is None or 0 <= steal <= 1


def test_steal_share_reads_proc_stat_deltas():
    from midword.bench.masks import cpu_times, steal_share

    assert steal_share((10, 1000), (40, 1100)) == pytest.approx(0.3)
    assert steal_share(None, (40, 1100)) is None
    assert steal_share((10, 1000), (10, 1000)) is None  # no time passed: no share
    now = cpu_times()
    if os.path.exists("/proc/stat"):
        steal, total = now
        assert 0 <= steal <= total and total > 0
    else:
        assert now is None
