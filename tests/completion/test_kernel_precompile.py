"""The lean model's kernels compiled in a child process (completion/kernel_precompile.py):
after a fresh install the server's own process loads them from numba's disk cache instead
of compiling them under its compile lock; a child that fails costs nothing but time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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


_STEP_SIGNATURE = r"""
import pickle, sys
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/completion"]
from byte_tokenizer import byte_tokenizer
from test_lean_gemma3 import pair
from midword.completion import kernel_precompile
_, _, lean = pair(byte_tokenizer(), int8=True, seed=5)
layers, kv_heads, _, head_dim = lean._cache.k.shape
keys = np.zeros((layers, kv_heads, 1, head_dim), dtype=np.float32)
out = np.empty((1, lean.hidden_size), dtype=np.float32)
args = lean.step_arguments(np.zeros(1, dtype=np.int64), 0, keys, np.zeros_like(keys), out)
with open(sys.argv[2], "wb") as f:
    pickle.dump([("step", kernel_precompile.signature_of(args))], f)
"""

_PARENT_LEAVES = r"""
import os, subprocess, sys
from midword.completion import kernel_precompile
env = dict(os.environ, **{kernel_precompile.PARENT_ENV: str(os.getpid())})
child = subprocess.Popen(
    [sys.executable, "-m", "midword.completion.kernel_precompile"],
    stdin=subprocess.PIPE,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    env=env,
)
with open(sys.argv[1], "rb") as f:
    child.stdin.write(f.read())
child.stdin.close()
print(child.pid, flush=True)
os._exit(0)  # the server goes away while the child compiles the decode step
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in status)
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_child_stops_when_the_server_is_gone(tmp_path):
    # The decode step's signature, from a process that runs the plain-Python twins (and
    # so compiles nothing); then, with an empty cache, compiling the step takes the child
    # many seconds: it must not outlive the process that started it by more than its poll.
    signature = tmp_path / "step.pickle"
    twins = dict(os.environ, NUMBA_DISABLE_JIT="1", NUMBA_CACHE_DIR=str(tmp_path / "unused"))
    made = subprocess.run(
        [sys.executable, "-c", _STEP_SIGNATURE, str(TESTS), str(signature)],
        capture_output=True,
        text=True,
        timeout=300,
        env=twins,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run(
        [sys.executable, "-c", _PARENT_LEAVES, str(signature)], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    pid = int(out.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 10 * kernel_precompile.PARENT_POLL_S + 5
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid), f"the compile child {pid} outlived its server"
    assert not any((tmp_path / "numba").rglob("*decode_step_py*.nbc"))  # stopped, not finished
