"""A lean forward for Gemma 3: the decoder computed with numpy and compiled kernels, no torch.

transformers' Gemma 3 runs a decode step through a few hundred modules, mask builders and
cache objects; on a small CPU that Python is a third of the step. This module computes
the same layers directly over the converted weights:

- token embeddings scaled by sqrt(hidden), RMSNorms with their (1 + weight) scale (the
  weights are stored as offsets from one), query and key RMSNorms per head (QK-norm),
- rotary position embeddings with the base of the layer's kind (Gemma 3: 10,000 for the
  sliding-window layers, 1,000,000 for the global ones), half-split rotation,
- grouped-query attention scaled by query_pre_attn_scalar**-0.5, with the window of the
  sliding layers (no attention-logit soft-capping: Gemma 3 has none; configs that ask
  for it stay with transformers),
- the gelu-tanh gated MLP, the four norms around attention and MLP, the final norm.

Weights are either float32 matrices or int8 in groups of 64 (completion/quantized.py).
The query, key and value projections are one fused matrix, and so are the gate and up
projections: one kernel call reads each weight once per step. A decode step's int8
matmuls can be split over threads (`threads`); the kernel releases the GIL.

Keys and values live in a static cache preallocated for `capacity` positions of every
layer (doubled when a sequence outgrows it, up to `max_context`). It keeps every position,
sliding layers included, so a request can go back to any earlier prefix; the window is
applied by slicing the keys (one new token) or by the mask (a chunk, a token tree).

`LeanGemma3` answers the `LanguageModel` protocol through `CachedModel`'s cache
bookkeeping, head rules and token trees (cached_model.py), as the transformers backend
does; only the body (`_forward`) and the head's weights are its own, so the two backends
share every rule about prefixes, branches and statistics. Nothing here imports torch:
a server with the stored int8 copy starts without it (torch and transformers are needed
to convert a model and to check the lean forward against it).
It is built from a loaded transformers model (`from_transformers`) or from stored arrays
(`from_arrays`, the on-disk int8 copy), and `check_against` compares its logits with a
reference on a probe set: the loader uses it once at load time and falls back to
transformers when they differ.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .cached_model import CachedModel, as_token_array
from .model import ModelStats, ModelUnavailable, default_threads
from .quantized import Int8Weights

if TYPE_CHECKING:
    from .model_transformers import TransformersModel

log = logging.getLogger(__name__)

# Preallocated cache positions; a longer sequence doubles it (up to max_context).
DEFAULT_CAPACITY = 2048
# Runs of up to this many new positions (decode steps, draft tokens) go through the
# compiled step (lean_kernels); longer prefill chunks through float32 matrix products.
KERNEL_MAX_POSITIONS = 16
# Matrices of a decode step at least this large are split over the model's threads.
LEAN_PARALLEL_MIN_WEIGHTS = 1 << 19
# Probe prompts for the load-time check: code, prose-like comments, and a repeated line.
PROBE_TEXTS = (
    "def add(a, b):\n    return a +",
    "import os\n\nfor name in sorted(os.listdir('.')):\n    # skip hidden files\n    if name.startswith('.'):",
    'class Point:\n    """A point in the plane."""\n\n    def __init__(self, x, y):\n        self.x = x\n        self.',
)
# Logits of the lean path and of transformers (same weights, float32) may differ by
# float rounding only.
CHECK_TOLERANCE = 1e-4

GEMMA3_TYPES = ("gemma3_text", "gemma3")


def supports(config) -> bool:
    """Whether `config` (a transformers text config) describes a model this module computes."""
    if getattr(config, "model_type", None) not in GEMMA3_TYPES:
        return False
    if getattr(config, "hidden_activation", None) not in ("gelu_pytorch_tanh",):
        return False
    if getattr(config, "use_bidirectional_attention", False) or getattr(config, "attention_bias", False):
        return False
    # transformers' Gemma 3 attention does not apply attention-logit soft-capping (Gemma 2
    # did); a config asking for it is left to transformers rather than guessed at.
    if getattr(config, "attn_logit_softcapping", None):
        return False
    from .model_transformers import _mask_kinds

    kinds = _mask_kinds(config)
    if kinds is None:
        return False
    params = getattr(config, "rope_parameters", None) or {}
    for kind in set(config.layer_types):
        p = params.get(kind) if isinstance(params, dict) else None
        if not p or p.get("rope_type", "default") != "default" or "rope_theta" not in p:
            return False
    return True


class _Matrix:
    """A projection's weight: a float32 (out, in) array or Int8Weights."""

    __slots__ = ("w", "int8", "out_features")

    def __init__(self, w):
        self.int8 = isinstance(w, Int8Weights)
        self.w = w
        self.out_features = w.out_features if self.int8 else int(w.shape[0])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.int8:
            return self.w.matmul(x)
        return x @ self.w.T

    @property
    def nbytes(self) -> int:
        if self.int8:
            return int(self.w.q.nbytes + self.w.scales.nbytes)
        return int(self.w.nbytes)


@dataclass
class _Layer:
    kind: str
    qkv: _Matrix
    o: _Matrix
    gate_up: _Matrix
    down: _Matrix
    # (1 + weight) of each RMSNorm, precomputed.
    input_norm: np.ndarray
    post_attn_norm: np.ndarray
    pre_ff_norm: np.ndarray
    post_ff_norm: np.ndarray
    q_norm: np.ndarray
    k_norm: np.ndarray


@dataclass
class Gemma3Spec:
    """The numbers of a Gemma 3 text config that the forward needs."""

    vocab_size: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layer_types: tuple[str, ...]
    window: int | None
    eps: float
    rope_theta: dict[str, float]
    scaling: float
    final_softcap: float | None
    max_positions: int

    @classmethod
    def from_config(cls, config) -> "Gemma3Spec":
        if not supports(config):
            raise ModelUnavailable(f"the lean forward does not compute {getattr(config, 'model_type', '?')} models")
        return cls(
            vocab_size=int(config.vocab_size),
            hidden=int(config.hidden_size),
            intermediate=int(config.intermediate_size),
            heads=int(config.num_attention_heads),
            kv_heads=int(config.num_key_value_heads),
            head_dim=int(config.head_dim),
            layer_types=tuple(config.layer_types[: config.num_hidden_layers]),
            window=int(config.sliding_window) if config.sliding_window else None,
            eps=float(config.rms_norm_eps),
            rope_theta={
                k: float(v["rope_theta"]) for k, v in config.rope_parameters.items() if k in set(config.layer_types)
            },
            scaling=float(config.query_pre_attn_scalar) ** -0.5,
            final_softcap=getattr(config, "final_logit_softcapping", None) or None,
            max_positions=int(getattr(config, "max_position_embeddings", None) or 8192),
        )

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict) -> "Gemma3Spec":
        d = dict(d)
        d["layer_types"] = tuple(d["layer_types"])
        return cls(**d)


class StaticKV:
    """Keys and values of every layer in preallocated buffers; `filled` positions are valid.

    `crop(-n)` forgets the last n positions (the same call as transformers' caches)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int, limit: int):
        self.limit = int(limit)
        cap = max(1, min(int(capacity), self.limit))
        self.k = np.empty((layers, kv_heads, cap, head_dim), dtype=np.float32)
        self.v = np.empty((layers, kv_heads, cap, head_dim), dtype=np.float32)
        self.filled = 0

    @property
    def capacity(self) -> int:
        return int(self.k.shape[2])

    def reserve(self, need: int) -> None:
        if need <= self.capacity:
            return
        if need > self.limit:
            raise ValueError(f"the KV cache holds at most {self.limit} positions, {need} asked for")
        cap = min(self.limit, max(need, 2 * self.capacity))
        for name in ("k", "v"):
            old = getattr(self, name)
            new = np.empty((old.shape[0], old.shape[1], cap, old.shape[3]), dtype=old.dtype)
            new[:, :, : self.filled] = old[:, :, : self.filled]
            setattr(self, name, new)

    def crop(self, count: int) -> None:
        if count > 0:
            raise ValueError(f"crop takes a negative count of positions to remove, not {count}")
        self.filled = max(0, self.filled + count)

    def get_seq_length(self) -> int:
        return self.filled


@dataclass
class StepProfile:
    """Seconds spent per part of the forward (collected only while `LeanGemma3.profile` is on)."""

    matmul: float = 0.0
    attention: float = 0.0
    head: float = 0.0
    total: float = 0.0
    steps: int = 0

    def reset(self) -> None:
        self.matmul = self.attention = self.head = self.total = 0.0
        self.steps = 0


class LeanGemma3(CachedModel):
    """Gemma 3 computed by `_forward` below behind the `LanguageModel` protocol."""

    def __init__(
        self,
        spec: Gemma3Spec,
        layers: list[_Layer],
        embed,
        final_norm: np.ndarray,
        tokenizer,
        *,
        name: str,
        max_context: int | None = None,
        capacity: int = DEFAULT_CAPACITY,
        threads: int | None = None,
        max_branch_nodes: int = 1024,
        prefill_chunk: int = 512,
        use_kernel: bool = True,
    ):
        self.name = name
        self.tokenizer = tokenizer
        self.stats = ModelStats()
        self.source = "memory"
        self.spec = spec
        self._layers = layers
        self._model = self._base = None
        self.config = None
        self._embed = embed  # float32 (vocab, hidden) array or Int8Weights (also the tied head)
        self._head_int8 = embed if isinstance(embed, Int8Weights) else None
        self._w: np.ndarray | None = None if self._head_int8 is not None else embed
        self._b = None
        self._final_norm = final_norm
        self._softcap = spec.final_softcap
        self.weights = "int8" if self._head_int8 is not None else "float32"
        self.dtype = "float32"  # of the activations (the transformers backend says torch.float32)
        self.vocab_size = spec.vocab_size
        self.hidden_size = spec.hidden
        if tokenizer.vocab_size > self.vocab_size:
            raise ModelUnavailable(
                f"model {name!r} has {self.vocab_size} output rows but its tokenizer {tokenizer.name!r} has "
                f"{tokenizer.vocab_size} tokens: they do not belong together"
            )
        self.bos_token_id = tokenizer.bos_token_id
        self.eos_token_ids = tokenizer.eos_token_ids
        self.max_context = int(min(max_context, spec.max_positions) if max_context else spec.max_positions)
        self.max_branch_nodes = int(max_branch_nodes)
        self.prefill_chunk = int(prefill_chunk)
        self.capacity = int(capacity)
        self._lock = threading.RLock()
        self._mask_kinds = (tuple(sorted(set(spec.layer_types))), spec.window)
        self._tree_ok = True
        self._embed_scale = np.float32(spec.hidden**0.5)
        # As transformers computes them: in float32.
        self._inv_freq = {
            kind: (
                np.float32(1.0)
                / (np.float32(theta) ** (np.arange(0, spec.head_dim, 2, dtype=np.float32) / spec.head_dim))
            ).astype(np.float32)
            for kind, theta in spec.rope_theta.items()
        }
        self.profile: StepProfile | None = None
        self.set_threads(default_threads() if threads is None else threads)
        # Decode steps go through the compiled step (lean_kernels) when every matrix is int8.
        self.use_kernel = bool(use_kernel)
        self._prepare_kernel()
        self._reset_state()
        self._start_kernel_warm_up()
        self.probe_tokens = self.encode_prompt(PROBE_TEXTS[0])
        self.probe_logits: np.ndarray | None = None
        # The reference logits the probe set was checked against (set by the checks).
        self.probe_reference: np.ndarray | None = None

    def __repr__(self):
        return f"LeanGemma3({self.name!r}, vocab_size={self.vocab_size}, weights={self.weights})"

    backend = "lean"

    def set_threads(self, threads: int) -> None:
        """Threads the int8 matmuls of a decode step are split over."""
        self.threads = max(1, int(threads))
        for layer in self._layers:
            for m in (layer.qkv, layer.o, layer.gate_up, layer.down):
                if m.int8:
                    m.w.threads = self.threads
                    m.w.min_parallel = LEAN_PARALLEL_MIN_WEIGHTS
        if self._head_int8 is not None:
            self._head_int8.threads = self.threads
            self._head_int8.min_parallel = None

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights the model holds (body, embedding/head, norms)."""
        total = 0
        for layer in self._layers:
            total += sum(m.nbytes for m in (layer.qkv, layer.o, layer.gate_up, layer.down))
        emb = self._embed
        total += emb.q.nbytes + emb.scales.nbytes if isinstance(emb, Int8Weights) else emb.nbytes
        return int(total)

    def quantize_int8(self) -> None:
        if self.weights == "int8":
            return
        raise ValueError("a lean model is built with int8 weights from the start (from_transformers of an int8 model)")

    # -- building ----------------------------------------------------------------

    @classmethod
    def from_transformers(cls, model: "TransformersModel", **kwargs) -> "LeanGemma3":
        """The lean forward over the weights of a loaded transformers Gemma 3 (float32, or
        int8 after `quantize_int8`: then the int8 values are shared, the float twins are not)."""
        import torch

        config = model.config
        spec = Gemma3Spec.from_config(config)
        if model.dtype != torch.float32:
            raise ModelUnavailable(f"the lean forward computes float32 or int8 weights, not {model.dtype}")
        base = model._base
        int8 = model._head_int8 is not None

        def matrix(*linears):
            if int8:
                parts = [lin.weights for lin in linears]
                return _Matrix(
                    Int8Weights.concat(parts)
                    if len(parts) > 1
                    else Int8Weights.from_quantized(parts[0].q, parts[0].scales)
                )
            return _Matrix(np.ascontiguousarray(torch.cat([lin.weight.detach() for lin in linears]).numpy()))

        def norm(module):
            return np.ascontiguousarray((1.0 + module.weight.detach().float()).numpy())

        layers = []
        for i, block in enumerate(base.layers[: len(spec.layer_types)]):
            att, mlp = block.self_attn, block.mlp
            layers.append(
                _Layer(
                    kind=spec.layer_types[i],
                    qkv=matrix(att.q_proj, att.k_proj, att.v_proj),
                    o=matrix(att.o_proj),
                    gate_up=matrix(mlp.gate_proj, mlp.up_proj),
                    down=matrix(mlp.down_proj),
                    input_norm=norm(block.input_layernorm),
                    post_attn_norm=norm(block.post_attention_layernorm),
                    pre_ff_norm=norm(block.pre_feedforward_layernorm),
                    post_ff_norm=norm(block.post_feedforward_layernorm),
                    q_norm=norm(att.q_norm),
                    k_norm=norm(att.k_norm),
                )
            )
        emb_w = base.embed_tokens.weight.detach()
        if int8:
            head = model._head_int8
            assert head is not None  # int8 says so
            if head.q.shape != tuple(emb_w.shape) or model._w.data_ptr() != emb_w.data_ptr():
                raise ModelUnavailable("the lean forward needs the output head tied to the token embeddings")
            embed: Int8Weights | np.ndarray = Int8Weights.from_quantized(head.q, head.scales)
        else:
            if model._w.data_ptr() != emb_w.data_ptr() and not torch.equal(model._w, emb_w):
                raise ModelUnavailable("the lean forward needs the output head tied to the token embeddings")
            embed = np.ascontiguousarray(emb_w.numpy())
        lean = cls(
            spec,
            layers,
            embed,
            norm(base.norm),
            model.tokenizer,
            name=model.name,
            max_context=model.max_context,
            **kwargs,
        )
        return lean

    def arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(spec dict, named arrays) of an int8 model: what `from_arrays` rebuilds it from."""
        if self.weights != "int8":
            raise ValueError("only int8 lean models are stored")
        out: dict[str, np.ndarray] = {}
        for i, layer in enumerate(self._layers):
            for part in ("qkv", "o", "gate_up", "down"):
                m = getattr(layer, part).w
                out[f"layers.{i}.{part}.q"] = m.q
                out[f"layers.{i}.{part}.scales"] = m.scales
            for part in ("input_norm", "post_attn_norm", "pre_ff_norm", "post_ff_norm", "q_norm", "k_norm"):
                out[f"layers.{i}.{part}"] = getattr(layer, part)
        out["embed.q"] = self._embed.q
        out["embed.scales"] = self._embed.scales
        out["final_norm"] = self._final_norm
        return self.spec.as_dict(), out

    @classmethod
    def from_arrays(cls, spec: dict, arrays, tokenizer, *, name: str, **kwargs) -> "LeanGemma3":
        """Rebuild an int8 model from `arrays()` (a mapping name -> array; memory maps work)."""
        sp = Gemma3Spec.from_dict(spec)

        def get(key):
            try:
                return arrays[key]
            except KeyError:
                raise ModelUnavailable(f"stored int8 weights lack {key!r}") from None

        def mat(key):
            return _Matrix(Int8Weights.from_quantized(get(f"{key}.q"), get(f"{key}.scales")))

        def vec(key, n):
            v = np.ascontiguousarray(get(key), dtype=np.float32)
            if v.shape != (n,):
                raise ModelUnavailable(f"stored {key!r} has shape {tuple(v.shape)}, expected ({n},)")
            return v

        shapes = {
            "qkv": ((sp.heads + 2 * sp.kv_heads) * sp.head_dim, sp.hidden),
            "o": (sp.hidden, sp.heads * sp.head_dim),
            "gate_up": (2 * sp.intermediate, sp.hidden),
            "down": (sp.hidden, sp.intermediate),
        }
        layers = []
        for i, kind in enumerate(sp.layer_types):
            mats = {}
            for part, shape in shapes.items():
                m = mat(f"layers.{i}.{part}")
                if (m.w.out_features, m.w.in_features) != shape:
                    raise ModelUnavailable(f"stored layers.{i}.{part} has shape {m.w.q.shape}, expected {shape}")
                mats[part] = m
            layers.append(
                _Layer(
                    kind=kind,
                    **mats,
                    input_norm=vec(f"layers.{i}.input_norm", sp.hidden),
                    post_attn_norm=vec(f"layers.{i}.post_attn_norm", sp.hidden),
                    pre_ff_norm=vec(f"layers.{i}.pre_ff_norm", sp.hidden),
                    post_ff_norm=vec(f"layers.{i}.post_ff_norm", sp.hidden),
                    q_norm=vec(f"layers.{i}.q_norm", sp.head_dim),
                    k_norm=vec(f"layers.{i}.k_norm", sp.head_dim),
                )
            )
        embed = Int8Weights.from_quantized(get("embed.q"), get("embed.scales"))
        if embed.q.shape != (sp.vocab_size, sp.hidden):
            raise ModelUnavailable(
                f"stored embeddings have shape {embed.q.shape}, expected {(sp.vocab_size, sp.hidden)}"
            )
        return cls(sp, layers, embed, vec("final_norm", sp.hidden), tokenizer, name=name, **kwargs)

    # -- checking ----------------------------------------------------------------

    def probe_sets(self) -> list[list[int]]:
        return [self.encode_prompt(t) for t in PROBE_TEXTS]

    def probe(self, probes: Sequence[Sequence[int]]) -> np.ndarray:
        """Full logits after each probe, computed as a prefill of all but the last token
        and one decode step (both paths of the forward); the cache is reset afterwards."""
        rows = []
        with self._lock:
            for toks in probes:
                self._reset_state()
                arr = as_token_array(toks, "probe", self.vocab_size)
                if arr.size > 1:
                    self._ensure(arr[:-1])
                self._ensure(arr)
                rows.append(self._head(self._hidden[arr.size - 1 : arr.size], None)[0])
            self._reset_state()
        self.stats.reset()
        return np.stack(rows)

    def check_against(
        self, reference: np.ndarray, probes: Sequence[Sequence[int]], tolerance: float | None = None
    ) -> float:
        """Compare the probe logits with `reference` (one row per probe); raises
        ModelUnavailable when any differs by more than `tolerance` (default CHECK_TOLERANCE). Returns the largest
        difference."""
        tolerance = CHECK_TOLERANCE if tolerance is None else tolerance
        got = self.probe(probes)
        if got.shape != np.shape(reference):
            raise ModelUnavailable(f"lean probe logits have shape {got.shape}, the reference {np.shape(reference)}")
        err = float(np.max(np.abs(got - reference)))
        if not err <= tolerance:
            raise ModelUnavailable(
                f"the lean forward of {self.name!r} differs from the reference logits by {err:.3g} "
                f"(tolerance {tolerance:.3g})"
            )
        self.probe_tokens = list(probes[0])
        self.probe_logits = got[0]
        return err

    # -- the cache -----------------------------------------------------------------

    def _new_cache(self) -> StaticKV:
        return StaticKV(
            len(self._layers),
            self.spec.kv_heads,
            self.spec.head_dim,
            min(self.capacity, self.max_context),
            self.max_context,
        )

    # -- the head --------------------------------------------------------------------

    def _head(self, hidden: np.ndarray, ids: np.ndarray | None, threads: int | None = None) -> np.ndarray:
        """`threads`: for this call (a batched step's), default the model's."""
        t0 = time.perf_counter()
        threads = max(1, int(threads or self.threads))
        rows = np.ascontiguousarray(hidden, dtype=np.float32)
        if ids is None:
            with _blas_threads(threads):
                if self._head_int8 is not None:
                    logits = self._head_int8.matmul(rows, threads=threads)
                else:
                    assert self._w is not None  # a float32 head where there is no int8 one
                    logits = rows @ self._w.T
            self.stats.full_head_rows += int(rows.shape[0])
        else:
            if self._head_int8 is None:
                assert self._w is not None
                logits = rows @ self._w[ids].T
            elif self._kernel_args is not None and rows.shape[0] <= KERNEL_MAX_POSITIONS:
                logits = self._head_rows_compiled(rows, ids, threads)
            else:
                with _blas_threads(threads):
                    logits = rows @ self._head_int8.dequantize_rows(ids).T
            self.stats.restricted_head_rows += int(rows.shape[0])
        if self._softcap:
            logits = np.tanh(logits / np.float32(self._softcap)) * np.float32(self._softcap)
        dt = time.perf_counter() - t0
        self.stats.head_seconds += dt
        if self.profile is not None:
            self.profile.head += dt
        return logits

    def _head_rows_compiled(self, rows: np.ndarray, ids: np.ndarray, threads: int | None = None) -> np.ndarray:
        """The restricted head of a few rows by the compiled kernel (lean_kernels.head_rows_py):
        it reads the allowed int8 rows in place instead of gathering and dequantizing them."""
        import numba

        from .lean_kernels import compiled

        a = self._kernel_args
        assert a is not None and self._head_int8 is not None  # only called with the compiled step's arguments
        index = np.ascontiguousarray(ids, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= self._head_int8.out_features):
            raise IndexError(f"head ids outside [0, {self._head_int8.out_features})")
        out = np.empty((rows.shape[0], index.size), dtype=np.float32)
        self.wait_compiled()
        numba.set_num_threads(min(threads or self.threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]  # set at import
        compiled().head_rows(a["embed_q"], a["embed_s"], index, np.ascontiguousarray(rows), out)
        return out

    def _embed_rows(self, ids: np.ndarray) -> np.ndarray:
        if isinstance(self._embed, Int8Weights):
            rows = self._embed.dequantize_rows(ids)
        else:
            rows = self._embed[ids]
        return rows * self._embed_scale

    # -- the body ----------------------------------------------------------------------

    def _rms(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        mean_square = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        return x * (np.float32(1.0) / np.sqrt(mean_square + np.float32(self.spec.eps))) * scale

    def _forward(self, ids, pos, see):
        """Final hidden rows (n, hidden) of tokens `ids` (n,) at positions `pos` (n,),
        appended after the cache's `filled` positions. `see`: None for a run of
        consecutive positions right after the cache (causal, windowed), else per layer
        kind which of [cache, new tokens] each new token attends to (a token tree)."""
        # After a fresh install the child compiles this forward's int8 products too: wait
        # for it rather than compile them a second time here.
        self.wait_compiled()
        t_start = time.perf_counter()
        prof = self.profile
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        positions = np.asarray(pos, dtype=np.int64)
        n = int(ids.shape[0])
        cache = self._cache
        c = cache.filled
        cache.reserve(c + n)
        total = c + n
        if (
            n <= KERNEL_MAX_POSITIONS
            and see is None
            and self._kernel_args is not None
            and int(positions[0]) == c
            and int(positions[-1]) == total - 1
        ):
            x = self._step_compiled(ids, c)
            self._account(cache, total, n, t_start, prof)
            return x
        with _blas_threads(self.threads):
            x = self._body(ids, positions, see, c, n, prof)
        self._account(cache, total, n, t_start, prof)
        return x

    def _body(self, ids: np.ndarray, positions: np.ndarray, see, c: int, n: int, prof) -> np.ndarray:
        """`_forward` of many positions: float32 matrix products and numpy attention."""
        sp = self.spec
        cache = self._cache
        total = c + n
        x = self._embed_rows(ids)
        heads, kvh, hd = sp.heads, sp.kv_heads, sp.head_dim
        rep = heads // kvh
        half = hd // 2
        q_end, k_end = heads * hd, (heads + kvh) * hd

        rope = {}
        for kind, inv in self._inv_freq.items():
            freqs = positions.astype(np.float32)[:, None] * inv[None, :]
            rope[kind] = (np.cos(freqs)[:, None, :], np.sin(freqs)[:, None, :])

        masks = self._masks(see, positions, c, n)
        t1 = 0.0
        for li, layer in enumerate(self._layers):
            h = self._rms(x, layer.input_norm)
            t0 = time.perf_counter() if prof else 0.0
            qkv = layer.qkv(h)
            if prof:
                prof.matmul += time.perf_counter() - t0
            q = self._rms(qkv[:, :q_end].reshape(n, heads, hd), layer.q_norm)
            k = self._rms(qkv[:, q_end:k_end].reshape(n, kvh, hd), layer.k_norm)
            v = qkv[:, k_end:].reshape(n, kvh, hd)
            cos, sin = rope[layer.kind]
            q1, q2 = q[..., :half], q[..., half:]
            q = np.concatenate((q1 * cos - q2 * sin, q2 * cos + q1 * sin), axis=-1)
            k1, k2 = k[..., :half], k[..., half:]
            k = np.concatenate((k1 * cos - k2 * sin, k2 * cos + k1 * sin), axis=-1)
            t0 = time.perf_counter() if prof else 0.0
            cache.k[li, :, c:total] = k.transpose(1, 0, 2)
            cache.v[li, :, c:total] = v.transpose(1, 0, 2)
            attn = self._attend(li, layer.kind, q, total, masks, rep)
            if prof:
                t1 = time.perf_counter()
                prof.attention += t1 - t0
            o = layer.o(attn)
            x = x + self._rms(o, layer.post_attn_norm)
            h = self._rms(x, layer.pre_ff_norm)
            t2 = time.perf_counter() if prof else 0.0
            if prof:
                prof.matmul += t2 - t1
            gu = layer.gate_up(h)
            if prof:
                prof.matmul += time.perf_counter() - t2
            m = _gelu_tanh_times(gu[:, : sp.intermediate], gu[:, sp.intermediate :])
            t0 = time.perf_counter() if prof else 0.0
            d = layer.down(m)
            if prof:
                prof.matmul += time.perf_counter() - t0
            x = x + self._rms(d, layer.post_ff_norm)
        return self._rms(x, self._final_norm)

    def _account(self, cache, total: int, n: int, t_start: float, prof) -> None:
        """Marks the cache filled to `total` and counts the forward in the stats (and the
        profile, when one is on)."""
        cache.filled = total
        dt = time.perf_counter() - t_start
        self.stats.forward_passes += 1
        self.stats.tokens_prefilled += n
        self.stats.forward_seconds += dt
        if prof:
            prof.total += dt
            prof.steps += 1

    def _prepare_kernel(self) -> None:
        """The arrays of the compiled decode step (lean_kernels.decode_step_py), gathered
        once: every matrix int8, the embedding table int8 (the tied head)."""
        self._kernel_args: dict[str, Any] | None = None
        if not self.use_kernel or self._head_int8 is None:
            return
        if not all(m.int8 for layer in self._layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down)):
            return
        sp = self.spec

        def mats(part):
            m = [getattr(layer, part).w for layer in self._layers]
            return tuple(np.ascontiguousarray(w.q) for w in m), tuple(np.ascontiguousarray(w.scales) for w in m)

        qkv_q, qkv_s = mats("qkv")
        o_q, o_s = mats("o")
        gu_q, gu_s = mats("gate_up")
        d_q, d_s = mats("down")
        norms = np.stack(
            [
                np.stack([layer.input_norm, layer.post_attn_norm, layer.pre_ff_norm, layer.post_ff_norm])
                for layer in (self._layers)
            ]
        ).astype(np.float32)
        qk_norms = np.stack([np.stack([layer.q_norm, layer.k_norm]) for layer in self._layers]).astype(np.float32)
        sliding = np.array([layer.kind == "sliding_attention" for layer in self._layers], dtype=np.bool_)
        inv_freq = np.stack([self._inv_freq[layer.kind] for layer in self._layers]).astype(np.float32)
        self._kernel_args = dict(
            embed_q=np.ascontiguousarray(self._head_int8.q),
            embed_s=np.ascontiguousarray(self._head_int8.scales),
            embed_scale=np.float32(self._embed_scale),
            weights=(qkv_q, qkv_s, o_q, o_s, gu_q, gu_s, d_q, d_s),
            norms=norms,
            qk_norms=qk_norms,
            sliding=sliding,
            inv_freq=inv_freq,
            window=int(sp.window or 0),
            eps=float(sp.eps),
            scaling=np.float32(sp.scaling),
            heads=int(sp.heads),
            final_norm=np.asarray(self._final_norm, dtype=np.float32),
        )
        # The compiled kernels take the weight groups packed by address; the matrices
        # stay alive in the tuples of "weights", which the plain twins take.
        from .lean_kernels import pack_layers

        self._kernel_args["packed_weights"] = pack_layers(self._kernel_args["weights"])

    def _start_kernel_warm_up(self) -> None:
        """Loads the decode step and the restricted head from numba's disk cache on a
        thread, over scratch arrays of one position, while the rest of the start goes on.
        What the cache lacks (after installing) a child process compiles first
        (kernel_precompile.py), so that the grammar kernels compiling meanwhile in this
        process do not wait behind them for numba's lock; if the child fails, they compile
        here. A step that comes first waits on the lock instead of compiling twice."""
        self._kernel_warm: threading.Thread | None = None
        a = self._kernel_args
        if a is None:
            return
        layers, kv_heads, _, head_dim = self._cache.k.shape

        def run() -> None:
            from . import kernel_precompile
            from .lean_kernels import compiled

            try:
                keys = np.zeros((layers, kv_heads, 1, head_dim), dtype=np.float32)
                values = np.zeros_like(keys)
                out = np.empty((1, self.hidden_size), dtype=np.float32)
                step_args = self.step_arguments(np.zeros(1, dtype=np.int64), 0, keys, values, out)
                index = np.zeros(1, dtype=np.int64)
                head_args = (a["embed_q"], a["embed_s"], index, out, np.empty((1, 1), dtype=np.float32))
                kernel_precompile.compile_in_child(
                    [
                        ("step", kernel_precompile.signature_of(step_args)),
                        ("head_rows", kernel_precompile.signature_of(head_args)),
                        *self._prefill_kernel_jobs(),
                    ]
                )
                kern = compiled()
                kern.step(*step_args)
                kern.head_rows(*head_args)
            except Exception:  # noqa: BLE001 - only a head start: the first step compiles it anyway
                log.debug("compiling the decode step ahead failed", exc_info=True)

        self._kernel_warm = threading.Thread(target=run, name="midword-warm-step", daemon=True)
        self._kernel_warm.start()

    def _prefill_kernel_jobs(self) -> list[tuple[str, tuple]]:
        """The int8 products a prefill compiles (kernel_precompile.KERNELS), for the types of
        this model's matrices (memory maps and arrays type apart): a child compiles them
        with the step, not the server's process after its grammar kernels."""
        from . import kernel_precompile
        from .quantized import dequantize_arguments

        jobs: list[tuple[str, tuple]] = []
        matrices = [m.w for layer in self._layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down) if m.int8]
        if self._head_int8 is not None:
            matrices.append(self._head_int8)
        # A signature holds types, not shapes: one small float32 matrix stands for the
        # rows, the output and the converted block of every product.
        rows = np.zeros((1, 1), dtype=np.float32)
        for w in matrices:
            for job in (
                ("int8_rows", kernel_precompile.signature_of((w.q, w.scales, rows, rows))),
                ("dequantize_into", kernel_precompile.signature_of(dequantize_arguments(w.q, w.scales, 0, rows))),
            ):
                if job not in jobs:
                    jobs.append(job)
        return jobs

    def wait_compiled(self) -> None:
        """Waits for the decode step's compilation started with the model (a server calls
        this before it says it is ready, so that its first completion is not cut short by
        its time budget while numba compiles; a step asked for meanwhile waits too, rather
        than compile the same kernel a second time beside the child)."""
        warm = self._kernel_warm
        if warm is not None and warm is not threading.current_thread():
            warm.join()
            self._kernel_warm = None

    def _step_compiled(self, tokens: np.ndarray, pos: int) -> np.ndarray:
        """The final hidden rows of `tokens` at positions from `pos` == the cache's length
        on, by the compiled step (their keys and values are written into the cache)."""
        import numba

        from .lean_kernels import compiled

        self.wait_compiled()
        step = compiled().step
        out = np.empty((tokens.size, self.hidden_size), dtype=np.float32)
        numba.set_num_threads(min(self.threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]  # set at import
        step(*self.step_arguments(tokens, pos, self._cache.k, self._cache.v, out))
        return out

    def time_parts(self) -> tuple[float, float]:
        """Seconds of one decode step's int8 products and of its attention over the cache
        as it is now, each run apart by the compiled kernels the step calls (`bench model`'s
        breakdown: the step itself is one call)."""
        import numba

        from .lean_kernels import compiled

        if self._kernel_args is None or self._cache.filled == 0:
            return float("nan"), float("nan")
        kern = compiled()
        numba.set_num_threads(min(self.threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]  # set at import
        a = self._kernel_args
        sp = self.spec
        t0 = time.perf_counter()
        for quantized, scales in zip(a["weights"][0::2], a["weights"][1::2], strict=True):
            for q, s in zip(quantized, scales, strict=True):
                x = self._probe_row(q.shape[1])[None]
                kern.matvec(q, s, x, np.empty((1, q.shape[0]), dtype=np.float32))
        matmul = time.perf_counter() - t0
        pos = self._cache.filled - 1
        keys, values = self._cache.k, self._cache.v
        qr = self._probe_row(sp.heads * sp.head_dim)
        out = np.empty(sp.heads * sp.head_dim, dtype=np.float32)
        scores = np.empty((sp.heads // sp.kv_heads, pos + 1), dtype=np.float32)
        t0 = time.perf_counter()
        for li, sliding in enumerate(a["sliding"]):
            start = pos + 1 - sp.window if sliding and sp.window and pos + 1 > sp.window else 0
            kern.attend(qr, keys[li], values[li], start, pos + 1, a["scaling"], scores, out)
        return matmul, time.perf_counter() - t0

    def _probe_row(self, n: int) -> np.ndarray:
        return np.linspace(-1.0, 1.0, n, dtype=np.float32)

    def step_arguments(
        self,
        tokens: np.ndarray,
        pos: int,
        keys: np.ndarray,
        values: np.ndarray,
        out: np.ndarray,
        packed: bool = True,
    ) -> tuple:
        """The arguments of lean_kernels.decode_step_py for `tokens` over these cache arrays:
        its compiled copy's (the weights packed), or with `packed=False` the plain twin's."""
        a = self._kernel_args
        assert a is not None, "the compiled step's arguments are built at load"
        return (
            np.ascontiguousarray(tokens, dtype=np.int64),
            pos,
            a["embed_q"],
            a["embed_s"],
            a["embed_scale"],
            *a["packed_weights" if packed else "weights"],
            a["norms"],
            a["qk_norms"],
            a["sliding"],
            a["inv_freq"],
            a["window"],
            keys,
            values,
            a["eps"],
            a["scaling"],
            a["heads"],
            a["final_norm"],
            out,
        )

    def _masks(self, see, positions: np.ndarray, c: int, n: int) -> dict:
        """Per layer kind: (start, additive) where attention reads the cached keys from
        `start` on and `additive` is None (every one of them visible) or an (n, keys)
        float32 mask of 0 and -inf."""
        sp = self.spec
        window = sp.window or 0
        kinds = set(sp.layer_types)
        out: dict = {}
        if see is not None:
            for kind in kinds:
                out[kind] = (0, np.where(see[kind], np.float32(0.0), np.float32(-np.inf)))
            return out
        if n == 1:
            for kind in kinds:
                sliding = kind == "sliding_attention" and window and c + 1 > window
                out[kind] = (c + 1 - window if sliding else 0, None)
            return out
        q_pos = positions[:, None]
        for kind in kinds:
            windowed = kind == "sliding_attention" and window > 0
            # Keys before the first query's window are visible to none of the queries.
            start = max(0, int(positions.min()) - window + 1) if windowed else 0
            k_pos = np.arange(start, c + n)[None, :]
            allowed = k_pos <= q_pos
            if windowed:
                allowed &= q_pos - k_pos < window
            out[kind] = (start, np.where(allowed, np.float32(0.0), np.float32(-np.inf)))
        return out

    def _attend(self, li: int, kind: str, q: np.ndarray, total: int, masks: dict, rep: int) -> np.ndarray:
        """Attention of queries q (n, heads, head_dim) over the layer's cached keys [start, total)."""
        sp = self.spec
        n = q.shape[0]
        start, additive = masks[kind]
        keys = self._cache.k[li, :, start:total]  # (kv, L, hd)
        values = self._cache.v[li, :, start:total]
        kvh = keys.shape[0]
        # (kv, rep * n, hd): the query heads sharing a key head are rows of one product.
        qg = np.ascontiguousarray(q.reshape(n, kvh, rep, sp.head_dim).transpose(1, 2, 0, 3)).reshape(
            kvh, rep * n, sp.head_dim
        )
        scores = np.matmul(qg, keys.transpose(0, 2, 1))
        scores *= np.float32(sp.scaling)
        if additive is not None:
            scores = scores.reshape(kvh, rep, n, -1)
            scores += additive
            scores = scores.reshape(kvh, rep * n, -1)
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        out = np.matmul(scores, values)  # (kv, rep * n, hd)
        return out.reshape(kvh, rep, n, sp.head_dim).transpose(2, 0, 1, 3).reshape(n, sp.heads * sp.head_dim)


_blas_control: Any = None


def _blas_threads(threads: int):
    """A context in which numpy's BLAS uses `threads` threads (the model's share of the
    cores, as the compiled kernels do); without threadpoolctl, BLAS keeps its own count."""
    global _blas_control
    if _blas_control is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _blas_control = False
        else:
            _blas_control = ThreadpoolController()
    if _blas_control is False:
        return contextlib.nullcontext()
    return _blas_control.limit(limits=threads, user_api="blas")


def _gelu_tanh_times(x: np.ndarray, up: np.ndarray) -> np.ndarray:
    """GELU of `x` with the tanh approximation (Gemma's `gelu_pytorch_tanh`) times `up`,
    in float32, in one scratch array (a prefill chunk's are megabytes each)."""
    t = x * x
    t *= x
    t *= np.float32(0.044715)
    t += x
    t *= np.float32(0.7978845608028654)
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= x
    t *= np.float32(0.5)
    t *= up
    return t


def build_checked(model: "TransformersModel", **kwargs) -> tuple[LeanGemma3, float]:
    """A lean model over `model`'s weights, checked against `model`'s own forward on the
    probe set. Raises ModelUnavailable when the architecture is not supported or the
    logits differ by more than CHECK_TOLERANCE."""
    lean = LeanGemma3.from_transformers(model, **kwargs)
    probes = lean.probe_sets()
    reference = reference_logits(model, probes)
    err = lean.check_against(reference, probes)
    lean.probe_reference = reference
    return lean, err


def reference_logits(model: "TransformersModel", probes: Sequence[Sequence[int]]) -> np.ndarray:
    """transformers' own logits after each probe (its full forward, no cache)."""
    import torch

    rows = []
    with torch.inference_mode():
        for toks in probes:
            ids = torch.tensor([list(toks)], dtype=torch.long)
            try:
                out = model._model(input_ids=ids, use_cache=False, logits_to_keep=1)
            except TypeError:
                out = model._model(input_ids=ids, use_cache=False)
            rows.append(out.logits[0, -1].float().numpy())
    return np.stack(rows)


__all__ = [
    "LeanGemma3",
    "Gemma3Spec",
    "StaticKV",
    "StepProfile",
    "build_checked",
    "reference_logits",
    "supports",
    "PROBE_TEXTS",
    "CHECK_TOLERANCE",
]
