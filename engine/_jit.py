"""One place that decides how hot loops are compiled.

Every hot loop is written once as plain Python (the reference twin) and compiled
here with numba's on-disk cache, so a new process pays no JIT for functions a
previous process already compiled. numba is imported only by modules that need it,
which keeps `midword --help` fast.
"""

from __future__ import annotations


def njit(fn):
    import numba

    return numba.njit(cache=True, nogil=True)(fn)
