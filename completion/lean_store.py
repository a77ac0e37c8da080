"""The on-disk int8 copy of a lean model: start in seconds, without transformers.

Quantizing Gemma 3 270M to int8 takes seconds, and before it come importing
transformers, reading the 1 GB float32 copy and building the model. The int8 matrices,
their scales and the norms of a checked lean model are therefore written once to
`<cache root>/models/<key>-lean-int8-v<format>/`:

- `weights.bin`: every array, 64-byte aligned, one after another;
- `reference.npy`: transformers' logits after each probe prompt, with the same int8
  weights (computed when the copy was written);
- `lean.json` (written last): the layout of weights.bin (name, dtype, shape, offset), the
  model's numbers, the probe prompts' tokens, each file's size and sampled digest.

A load maps weights.bin copy-on-write (pages are read on first use and shared with the
page cache; nothing is re-quantized), rebuilds the model, and runs the probe prompts:
their logits must equal the stored reference within the lean check's tolerance, as a
fresh build's must equal transformers'. A missing, damaged or mismatching copy is
deleted and rebuilt by the caller.

That check runs the model over the probes (seconds of a start on a CPU), so a load
that passes it leaves `verified.json`: what it checked (the manifest's digest, each
file's size and modification time, the lean forward's source and kernels, the numba and numpy
versions). A later load whose stamp still says the same skips the probes; any change
of files, code or libraries, or `MIDWORD_VERIFY_MODEL=1`, checks again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np

_FORMAT = 1
_MANIFEST = "lean.json"
_WEIGHTS = "weights.bin"
_REFERENCE = "reference.npy"
_STAMP = "verified.json"
# The modules whose code computes the lean model's logits: a change in any re-checks.
_FORWARD_MODULES = ("gemma3_lean.py", "cached_model.py", "quantized.py", "lean_kernels.py", "lean_store.py")
_ALIGN = 64


def lean_dir(key: str) -> Path:
    from .model_store import models_dir

    return models_dir() / f"{key}-lean-int8-v{_FORMAT}"


def problem(folder: Path) -> str | None:
    """Why the int8 copy in `folder` cannot be used, or None when it looks intact."""
    from .model_store import sample_digest

    if not folder.is_dir():
        return "not built yet"
    try:
        manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{_MANIFEST} is missing (an interrupted write)"
    except (OSError, ValueError) as exc:
        return f"{_MANIFEST} is unreadable: {exc}"
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        return "another cache format"
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {_WEIGHTS, _REFERENCE}:
        return f"{_MANIFEST} lists the wrong files"
    for name, info in files.items():
        try:
            size = (folder / name).stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != info.get("size"):
            return f"{name} has {size} bytes, expected {info.get('size')}"
        try:
            if sample_digest(folder / name) != info.get("sample"):
                return f"{name} changed since it was written"
        except OSError as exc:
            return f"{name} is unreadable: {exc}"
    return None


def store(folder: Path, model, reference: np.ndarray, probes) -> str | None:
    """Write `model` (an int8 LeanGemma3) atomically; returns why it could not, or None."""
    from .model_store import sample_digest

    spec, arrays = model.arrays()
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        layout = []
        offset = 0
        with open(tmp / _WEIGHTS, "wb") as f:
            for name, arr in arrays.items():
                arr = np.ascontiguousarray(arr)
                pad = -offset % _ALIGN
                f.write(b"\0" * pad)
                offset += pad
                layout.append({"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape), "offset": offset})
                f.write(arr.tobytes())
                offset += arr.nbytes
        np.save(tmp / _REFERENCE, np.asarray(reference, dtype=np.float32), allow_pickle=False)
        files = {
            n: {"size": (tmp / n).stat().st_size, "sample": sample_digest(tmp / n)} for n in (_WEIGHTS, _REFERENCE)
        }
        manifest = {
            "format": _FORMAT,
            "name": model.name,
            "spec": spec,
            "arrays": layout,
            "probes": [list(map(int, p)) for p in probes],
            "files": files,
        }
        (tmp / _MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
        try:
            os.rename(tmp, folder)
        except OSError:
            if problem(folder) is None:
                shutil.rmtree(tmp, ignore_errors=True)  # another process wrote it first
            else:
                shutil.rmtree(folder, ignore_errors=True)
                os.rename(tmp, folder)
        return None
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        return f"{type(exc).__name__}: {exc}"


class Damaged(Exception):
    pass


def open_lean(folder: Path, tokenizer, *, name: str, max_context=None, threads: int | None = None):
    """The int8 lean model stored in `folder`, checked against its stored reference.
    Raises Damaged when it cannot be used (the caller deletes and rebuilds it)."""
    from .gemma3_lean import LeanGemma3
    from .model import ModelUnavailable

    try:
        manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
        reference = np.load(folder / _REFERENCE, allow_pickle=False)
        # Copy-on-write: writable arrays, pages shared with the page cache.
        blob = np.memmap(folder / _WEIGHTS, dtype=np.uint8, mode="c")
        arrays = {}
        for entry in manifest["arrays"]:
            dtype = np.dtype(entry["dtype"])
            shape = tuple(int(x) for x in entry["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            lo = int(entry["offset"])
            hi = lo + count * dtype.itemsize
            if lo < 0 or hi > blob.size or lo % dtype.itemsize:
                raise ValueError(f"array {entry['name']!r} lies outside {_WEIGHTS}")
            arrays[entry["name"]] = blob[lo:hi].view(dtype).reshape(shape)
        model = LeanGemma3.from_arrays(
            manifest["spec"], arrays, tokenizer, name=name, max_context=max_context, threads=threads
        )
        probes = manifest["probes"]
        stamp = _stamp(folder)
        if os.environ.get("MIDWORD_VERIFY_MODEL") != "1" and _read_stamp(folder) == stamp:
            # Checked by an earlier load of these very files with this very code.
            model.probe_tokens = list(probes[0])
            model.probe_logits = np.asarray(reference[0])
        else:
            model.check_against(reference, probes)
            _write_stamp(folder, stamp)
    except (OSError, ValueError, KeyError, TypeError, ModelUnavailable) as exc:
        raise Damaged(f"{type(exc).__name__}: {exc}") from exc
    model.probe_reference = reference
    return model


def _stamp(folder: Path) -> dict:
    """What a passed probe check vouches for (see the module's docstring)."""
    import numba

    here = Path(__file__).resolve().parent
    code = hashlib.sha256()
    for name in _FORWARD_MODULES:
        code.update((here / name).read_bytes())
    files = {}
    for name in (_WEIGHTS, _REFERENCE):
        st = (folder / name).stat()
        files[name] = [st.st_size, st.st_mtime_ns]
    return {
        "manifest": hashlib.sha256((folder / _MANIFEST).read_bytes()).hexdigest(),
        "files": files,
        "code": code.hexdigest(),
        "numba": numba.__version__,
        "numpy": np.__version__,
    }


def _read_stamp(folder: Path) -> dict | None:
    try:
        value = json.loads((folder / _STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_stamp(folder: Path, stamp: dict) -> None:
    """Best effort: without a stamp the next load checks again."""
    tmp = folder / f".{_STAMP}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        tmp.write_text(json.dumps(stamp), encoding="utf-8")
        os.replace(tmp, folder / _STAMP)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
