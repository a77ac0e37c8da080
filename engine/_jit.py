"""One place that decides how hot loops are compiled.

Every hot loop is written once as plain Python (the reference twin) and compiled
here with numba's on-disk cache, so a new process pays no JIT for functions a
previous process already compiled. numba is imported only by modules that need it,
which keeps `midword --help` fast.
"""

from __future__ import annotations

import numpy as np

# Hot loops index arrays through `at`, as unsigned: numba then leaves out the
# negative-index wraparound (a compare and a select) that every signed index gets. The
# mask walk makes half a dozen accesses per trie node, and that check was a quarter of
# its time. Only for indexes that are non-negative by construction: an unsigned index
# made from a negative number reads far out of bounds (numba checks no bounds either way).
at = np.uint64


def unpack_group(group, spec):
    """A group of arrays as a tuple: the plain twins are handed the tuple itself. The
    compiled kernels bind this name to `_views.unpack_group`, which also reads a group
    packed by address (see there)."""
    return group


def njit(fn):
    import numba

    return numba.njit(cache=True, nogil=True)(fn)


_compiled: dict = {}


def _shape_key(value):
    # What numba's type of an argument depends on, read without numba's typeof
    # (which costs more than the whole row build for a small grammar).
    if isinstance(value, tuple):
        return tuple(_shape_key(v) for v in value)
    flags = getattr(value, "flags", None)
    if flags is None:
        return type(value)
    return (value.dtype.char, value.ndim, flags.c_contiguous, flags.writeable)


def compiled_for(fn, args):
    """`fn` compiled for exactly the types of `args`, called without numba's dispatcher.

    The dispatcher infers the type of every argument on every call (about 0.3 µs an
    array); the mask walk and the row builder take 20 to 35 arrays and run thousands of
    times per mask, so that alone cost more than the work. Callers must keep passing
    arguments of the same types (the same dtypes and dimensions), as the walk and the
    parser do with arrays they own. A plain-Python twin is returned as it is."""
    if not hasattr(fn, "compile"):
        return fn
    key = (fn, tuple(_shape_key(a) for a in args))
    entry = _compiled.get(key)
    if entry is None:
        import numba

        entry = fn.compile(tuple(numba.typeof(a) for a in args))
        _compiled[key] = entry
    return entry


_entries_by_fn: dict = {}


def compiled_once(fn, args):
    """`compiled_for`, looked up once per process instead of once per caller: for
    callers whose arguments are of the same types in every process-wide use (the
    parser's and the walk's own arrays). Reading the argument types cost each new
    grammar about 20 µs per function, in its time to first mask."""
    entry = _entries_by_fn.get(fn)
    if entry is None:
        entry = _entries_by_fn[fn] = compiled_for(fn, args)
    return entry


def njit_calling(fn, depends=(), **callees):
    """`fn` compiled with some of its global names bound to other compiled functions.

    The plain-Python twin `fn` keeps calling the plain twins it names; the compiled
    copy calls the compiled ones. numba keys its on-disk cache on the caller's source
    file only, and a compiled callee is linked into the caller, so the files named in
    `depends` (the callees' modules) are added to the cache's freshness stamp: an
    edited callee then recompiles its callers instead of running stale code."""
    import types

    import numba

    names = dict(fn.__globals__)
    names.update(callees)
    bound = types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__, fn.__closure__)
    bound.__qualname__ = fn.__qualname__
    bound.__module__ = fn.__module__
    bound.__doc__ = fn.__doc__
    compiled = numba.njit(cache=True, nogil=True)(bound)
    stamp_dependencies(compiled, depends)
    return compiled


def stamp_dependencies(compiled, depends) -> None:
    """Adds the files `depends` to the freshness stamp of `compiled`'s on-disk cache:
    numba stamps only the function's own source file, while code it links in from other
    modules (compiled callees, intrinsics) changes with theirs."""
    import os

    cache_file = getattr(getattr(compiled, "_cache", None), "_cache_file", None)
    if depends and cache_file is not None and hasattr(cache_file, "_source_stamp"):
        stamps = []
        for path in depends:
            st = os.stat(path)
            stamps.append((os.path.basename(path), st.st_mtime, st.st_size))
        cache_file._source_stamp = (cache_file._source_stamp, tuple(stamps))
