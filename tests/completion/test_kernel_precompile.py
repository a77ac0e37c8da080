"""The lean model's kernels compiled in a child process (completion/kernel_precompile.py):
after a fresh install the server's own process loads them from numba's disk cache instead
of compiling them under its compile lock; a child that fails costs nothing but time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
numba = pytest.importorskip("numba")

from midword.completion import kernel_precompile  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]

_FRESH_INSTALL = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/completion"]
from byte_tokenizer import byte_tokenizer
from test_lean_gemma3 import PROMPT, pair
from midword.completion import kernel_precompile, lean_kernels, quantized
_, _, lean = pair(byte_tokenizer(), int8=True, seed=5)
lean.wait_compiled()
kern = lean_kernels.compiled()
toks = lean.encode_prompt(PROMPT)
lean.next_logits(toks[:-1])
logits = lean.next_logits(toks)  # a decode step through the compiled step
print(json.dumps({
    "step": [sum(kern.step.stats.cache_hits.values()), sum(kern.step.stats.cache_misses.values())],
    "head_rows": [sum(kern.head_rows.stats.cache_hits.values()), sum(kern.head_rows.stats.cache_misses.values())],
    "prefill": [
        sum(sum(getattr(k.stats, f).values()) for k in (quantized.int8_rows_kernel(), quantized.dequantize_kernel()))
        for f in ("cache_hits", "cache_misses")
    ],
    "steps": lean.stats.forward_passes,
    "finite": bool(abs(logits).max() < 1e4),
}))
"""


def test_a_fresh_install_loads_the_kernels_a_child_compiled(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_INSTALL, str(TESTS)], capture_output=True, text=True, timeout=900, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # Loaded from the disk cache, never compiled in the model's own process.
    assert got["step"][0] >= 1 and got["step"][1] == 0
    assert got["head_rows"][0] >= 1 and got["head_rows"][1] == 0
    # The prefill's int8 products too (few rows, or many through float32 blocks).
    assert got["prefill"][0] >= 1 and got["prefill"][1] == 0
    assert got["finite"] and got["steps"] >= 2
    assert any((tmp_path / "numba").rglob("*decode_step_py*.nbc"))


def test_a_child_that_cannot_compile_reports_it():
    # head_rows takes five arrays: a child asked to compile it for one integer fails typing.
    assert not kernel_precompile.compile_in_child([("head_rows", (numba.types.int64,))], timeout=300)


def test_nothing_to_compile_needs_no_child(monkeypatch):
    monkeypatch.setattr(kernel_precompile, "is_cached", lambda name, sig: True)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("no child was needed"))
    assert kernel_precompile.compile_in_child([("step", (numba.types.int64,))])
