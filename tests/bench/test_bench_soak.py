"""`midword bench soak` runs a session of edits and completions against the server (here
with the fake engine, tests/fake_engine.py) and reports answers and RSS samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_soak_reports_every_answer_and_rss(tmp_path):
    corpus = tmp_path / "corpus.py"
    corpus.write_text("alpha = 1\nbeta = alpha + 1\nalpha_beta = beta\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "midword",
            "bench",
            "soak",
            str(corpus),
            "--engine",
            "tests.fake_engine:FakeEngine",
            "--model",
            "fake",
            "--completions",
            "300",
            "--warmup",
            "50",
            "--samples",
            "6",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["unanswered"] == 0 and report["exit_code"] == 0
    assert sum(report["answers"].values()) == 300 and report["answers"]["items"] > 0
    assert report["rss_mb"]["after_warmup"] > 0 and report["rss_mb"]["growth"] is not None
    assert [n for n, _ in report["samples"]][-1] == 300
