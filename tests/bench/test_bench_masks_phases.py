"""`midword bench masks --phases`: midword's time to first mask split by phase."""

import json
from pathlib import Path

from midword.bench.masks import PHASES, main

TAIL = Path(__file__).resolve().parents[2] / "midword" / "bench" / "data" / "tail"


def test_phases_time_every_schema_by_phase(capsys):
    assert main([str(TAIL), "--tokenizer", "llama3", "--phases", "--json", "--limit", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == list(PHASES)
    for name, row in out.items():
        assert row["files"] == 2, name
        assert row["p50_us"] > 0 and row["p90_us"] >= row["p50_us"], (name, row)
    parts = sum(out[name]["p50_us"] for name in PHASES if name != "total")
    # With two samples p50 is their mean, so the phases' medians add up to the total's.
    assert abs(parts - out["total"]["p50_us"]) <= 1e-6 * out["total"]["p50_us"] + 1e-3


def test_every_tail_schema_compiles_and_judges_its_instances(capsys):
    # The tail set holds the shapes behind past slow masks, each written here with valid
    # and invalid instances: a shape that stops compiling, or a judgement that flips,
    # would leave the benchmark timing something else.
    assert main([str(TAIL), "--tokenizer", "llama3", "--compile", "file", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["midword"]
    files = len(list(TAIL.glob("*.json")))
    assert files >= 22
    assert (out["files"], out["passed"]) == (files, files), out
    assert out["rejected_valid"] == out["accepted_invalid"] == out["compile_errors"] == 0
    assert out["invalid_tests"] >= files // 2  # most shapes judge an invalid instance too
