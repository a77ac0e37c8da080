"""Compiling the lean model's kernels in a child process, into numba's disk cache.

numba compiles under one lock per process. After a fresh install (or an upgrade that
changes a kernel) the lean decode step takes longer to compile than any grammar kernel,
and while it compiles on the model's warm-up thread, every grammar kernel the first mask
needs waits for the lock. A child process compiles the model's kernels instead, on
another core and under its own lock, for the exact argument types the server will pass;
the server's thread waits for the child and then loads them from the cache in a fraction
of a second. Any failure of the child (no cache directory, a crash, a time-out) only
costs the head start: the kernel then compiles in the server's process, as it would
without the child.

The child is `python -m midword.completion.kernel_precompile`, reading a pickled list of
(kernel name, numba signature) on stdin; the names are those of `KERNELS`. It stops when
the process that started it is gone: a server stopped (or restarted) during a fresh
install's start leaves no compile running beside the next one.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from typing import Callable

log = logging.getLogger(__name__)

# A compile that takes longer than this is left to the server's own process.
CHILD_TIMEOUT_S = 600.0
# The child's environment names the process that waits for it here.
PARENT_ENV = "MIDWORD_PRECOMPILE_PARENT"
PARENT_POLL_S = 0.5


def _lean_kernel(name: str) -> Callable[[], object]:
    def get():
        from . import lean_kernels

        return getattr(lean_kernels.compiled(), name)

    return get


def _batch_step():
    from . import lean_batch

    return lean_batch.compiled()


def _int8_rows():
    from . import quantized

    return quantized.int8_rows_kernel()


def _dequantize_into():
    from . import quantized

    return quantized.dequantize_kernel()


# The dispatchers a child may compile, by name.
KERNELS: dict[str, Callable[[], object]] = {
    "step": _lean_kernel("step"),
    "head_rows": _lean_kernel("head_rows"),
    "batch_step": _batch_step,
    # a prefill's int8 products: few rows, and many rows through float32 blocks
    "int8_rows": _int8_rows,
    "dequantize_into": _dequantize_into,
}


def signature_of(args: tuple) -> tuple:
    """numba's types of `args`: the signature a call with them compiles."""
    import numba

    return tuple(numba.typeof(a) for a in args)


def is_cached(name: str, signature: tuple) -> bool:
    """Whether numba's disk cache holds kernel `name` compiled for `signature` by the
    kernel's current source. False where that cannot be told (then a child compiles it,
    at worst for nothing)."""
    try:
        cache_file = KERNELS[name]()._cache._cache_file  # type: ignore[attr-defined]
        index = cache_file._load_index()
    except Exception:  # noqa: BLE001 - a numba without this layout, or no cache at all
        return False
    return any(key[0] == signature for key in index)


def compile_in_child(jobs: list[tuple[str, tuple]], timeout: float = CHILD_TIMEOUT_S) -> bool:
    """Compiles each (kernel name, signature) of `jobs` not yet in numba's disk cache in a
    child process; True when every one is in the cache afterwards."""
    for name, _ in jobs:
        if not hasattr(KERNELS[name](), "_cache"):
            return False  # the plain-Python twins (numba's JIT turned off): nothing to cache
    todo = [(name, sig) for name, sig in jobs if not is_cached(name, sig)]
    if not todo:
        return True
    try:
        payload = pickle.dumps(todo)
    except Exception:  # noqa: BLE001 - a type numba cannot pickle: compile in process
        log.debug("kernel signatures do not pickle", exc_info=True)
        return False
    cmd = [sys.executable, "-m", "midword.completion.kernel_precompile"]
    try:
        env = dict(os.environ, **{PARENT_ENV: str(os.getpid())})
        done = subprocess.run(cmd, input=payload, capture_output=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("compiling kernels in a child failed: %s", exc)
        return False
    if done.returncode != 0:
        log.debug("compiling kernels in a child failed (%s): %s", done.returncode, done.stderr[-2000:])
        return False
    return all(is_cached(name, sig) for name, sig in todo)


def _exit_with_parent(parent: int) -> None:
    """Ends this process once `parent` is gone (then this process is another's child)."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(3)

    threading.Thread(target=watch, name="midword-precompile-parent", daemon=True).start()


def main() -> int:
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit():
        _exit_with_parent(int(parent))
    jobs = pickle.loads(sys.stdin.buffer.read())
    for name, signature in jobs:
        KERNELS[name]().compile(signature)  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
