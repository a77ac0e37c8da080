"""`midword bench lsp` with the fake engine, and the lazy imports of the CLI entry points."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from midword.bench.lsp import (
    BURST_GAP_MS,
    BURST_KEYS,
    PAUSE_MS,
    add_lsp_bench_arguments,
    burst_schedule,
    format_report,
    percentile,
    run_lsp_bench,
)

ROOT = Path(__file__).resolve().parents[2]


def test_percentile():
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([float(i) for i in range(101)], 95) == 95.0


def test_bench_replays_typing_through_a_real_session(tmp_path, capsys, monkeypatch):
    # a repetitive file, so typing runs into completions shown before (cache hits)
    source = tmp_path / "sample.py"
    source.write_text("total = compute_total(items)\ncount = compute_count(items)\n" * 3, encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_lsp_bench_arguments(parser)
    args = parser.parse_args(
        [
            str(source),
            "--engine",
            "tests.fake_engine:FakeEngine",
            "--model",
            "fake?step_ms=2",
            "--start",
            "58",
            "--limit",
            "40",
            "--interval-ms",
            "40",
            "--line-pause-ms",
            "100",
            "--debounce-ms",
            "15",
            "--json",
        ]
    )
    monkeypatch.chdir(ROOT)  # the server finds tests.fake_engine from here
    assert run_lsp_bench(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["typed_chars"] == 40 and report["requests"] == 40
    assert sum(report["outcomes"].values()) == 40
    assert report["latency"]["n"] == report["outcomes"].get("answered", 0) > 0
    assert report["latency"]["p50_ms"] >= 15  # keystroke to answer includes the debounce
    server = report["server"]
    assert server["cache_hits"] > 0 and server["model_calls"] > 0 and server["tokens_generated"] > 0
    assert server["requests"] == 40
    assert set(report["latency_by_source"]) <= {"model", "cache", "prefetch"}
    text = format_report(report)
    assert "p50 ms" in text and "cache hits" in text


def test_burst_schedule_is_seeded_and_covers_every_key():
    bursts = burst_schedule(500, seed=3)
    assert bursts == burst_schedule(500, seed=3)  # the same trace every run
    assert bursts != burst_schedule(500, seed=4)
    assert bursts[0].start == 0 and bursts[-1].end == 500
    assert all(a.end == b.start for a, b in zip(bursts, bursts[1:], strict=False))  # every key once, in order
    for b in bursts[:-1]:
        assert BURST_KEYS[0] <= b.end - b.start <= BURST_KEYS[1]
    for b in bursts:
        assert len(b.gaps_ms) == b.end - b.start
        assert all(BURST_GAP_MS[0] <= g <= BURST_GAP_MS[1] for g in b.gaps_ms[:-1])
        assert PAUSE_MS[0] <= b.gaps_ms[-1] <= PAUSE_MS[1]
    assert burst_schedule(0, seed=3) == []


def test_bench_bursts_trace_scores_each_pause(tmp_path, capsys, monkeypatch):
    source = tmp_path / "sample.py"
    source.write_text("total = compute_total(items)\ncount = compute_count(items)\n" * 3, encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_lsp_bench_arguments(parser)
    args = parser.parse_args(
        [str(source), "--engine", "tests.fake_engine:FakeEngine", "--model", "fake?step_ms=2", "--start", "58"]
        + ["--limit", "12", "--trace", "bursts", "--seed", "1", "--setting", "firstAnswerMs=0", "--json"]
    )
    monkeypatch.chdir(ROOT)
    assert run_lsp_bench(args) == 0
    report = json.loads(capsys.readouterr().out)
    pauses = report["pauses"]
    assert pauses["pauses"] == len(burst_schedule(12, seed=1))
    assert pauses["shown"] == pauses["latency"]["n"] <= pauses["pauses"]
    assert pauses["answered_share"] == round(pauses["shown"] / pauses["pauses"], 3)
    # every model answer carries the server's own timings
    assert report["model_time_ms"] is None or {"request", "server"} <= set(report["model_time_ms"])
    assert "bursts trace (seed 1)" in format_report(report)


def test_bench_reports_unreadable_file(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_lsp_bench_arguments(parser)
    assert run_lsp_bench(parser.parse_args([str(tmp_path / "missing.py")])) == 2
    assert "cannot read" in capsys.readouterr().err


def test_entry_points_import_lazily():
    code = (
        "import sys, argparse\n"
        "import midword.server.cli as c, midword.bench.lsp as b\n"
        "p = argparse.ArgumentParser(); c.add_serve_arguments(p)\n"
        "q = argparse.ArgumentParser(); b.add_lsp_bench_arguments(q)\n"
        "heavy = [m for m in ('pygls', 'lsprotocol', 'numba', 'torch', 'transformers') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
