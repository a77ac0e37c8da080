"""The transformers backend of `LanguageModel`: any causal LM transformers loads.

The cache bookkeeping, the sparse head's rules and the token trees are `CachedModel`'s
(cached_model.py); this module runs the model's own body over a `DynamicCache` whose
layers grow in place, and applies the head. transformers' windowed cache layers drop old
keys and so cannot be rolled back to an earlier prefix: every layer here keeps all
positions, and the window is applied by the attention mask instead.

The model's own forward is run once at load time on a probe prompt to check that its
body plus midword's head agree with the model's logits.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from .cached_model import (
    DEFAULT_MAX_BRANCH_NODES,
    PREFILL_CHUNK,
    CachedModel,
    ModelState,
    TokenTree,
    as_token_array,
    common_prefix,
)
from .model import ModelStats, ModelUnavailable

if TYPE_CHECKING:
    from .quantized import Int8Weights

_PROBE_TEXT = "def add(a, b):\n    return a +"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# Names this module had before the shared part moved to cached_model.py.
_as_token_array = as_token_array
_common_prefix = common_prefix
_Tree = TokenTree


def torch_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype must be one of {', '.join(map(repr, _DTYPES))}, not {name!r}") from None


class TransformersModel(CachedModel):
    """A transformers causal LM behind the `LanguageModel` protocol (see the module docstring)."""

    def __init__(
        self,
        hf_model,
        tokenizer,
        *,
        name: str,
        max_context: int | None = None,
        max_branch_nodes: int = DEFAULT_MAX_BRANCH_NODES,
        prefill_chunk: int = PREFILL_CHUNK,
        probe_tokens: Sequence[int] | None = None,
    ):
        self.name = name
        self.tokenizer = tokenizer
        self.stats = ModelStats()
        # Where the weights came from: set by the loader ("cache", "converted", "directory").
        self.source = "memory"
        self._model = hf_model.eval()
        self._base = _base_model(hf_model)
        self.config = getattr(hf_model.config, "get_text_config", lambda: hf_model.config)()
        head = hf_model.get_output_embeddings()
        if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
            raise ModelUnavailable(f"model {name!r} has no output embedding (lm_head) weight; it is not a causal LM")
        self._w = head.weight.detach()
        bias = getattr(head, "bias", None)
        self._b = bias.detach() if isinstance(bias, torch.Tensor) else None
        self._head_int8: Int8Weights | None = None
        self.weights = str(self._w.dtype).removeprefix("torch.")
        self._softcap = getattr(self.config, "final_logit_softcapping", None) or None
        self.dtype = self._w.dtype
        self.vocab_size = int(self._w.shape[0])
        self.hidden_size = int(self._w.shape[1])
        if tokenizer.vocab_size > self.vocab_size:
            raise ModelUnavailable(
                f"model {name!r} has {self.vocab_size} output rows but its tokenizer {tokenizer.name!r} has "
                f"{tokenizer.vocab_size} tokens: they do not belong together"
            )
        self.bos_token_id = tokenizer.bos_token_id
        self.eos_token_ids = tokenizer.eos_token_ids
        limit = getattr(self.config, "max_position_embeddings", None) or 8192
        self.max_context = int(min(max_context, limit) if max_context else limit)
        self.max_branch_nodes = int(max_branch_nodes)
        self.prefill_chunk = int(prefill_chunk)
        self._lock = threading.RLock()
        self._mask_kinds = _mask_kinds(self.config)
        self._tree_ok = self._mask_kinds is not None
        self._reset_state()
        self.probe_tokens = list(probe_tokens) if probe_tokens is not None else self.encode_prompt(_PROBE_TEXT)
        self.probe_logits: np.ndarray | None = self._check_head()

    backend = "transformers"

    def __repr__(self):
        return f"TransformersModel({self.name!r}, vocab_size={self.vocab_size}, weights={self.weights})"

    def quantize_int8(self) -> None:
        """Store every linear layer and the output head as int8 weights in groups of 64
        (float32 activations; see completion/quantized.py). Decode steps then read a
        quarter of the bytes. Tied input embeddings take the same dequantized values, so
        the model stays one consistent set of weights; the probe check is run again."""
        from .quantized import Int8Weights
        from .quantized_torch import quantize_linears

        if self.dtype != torch.float32:
            raise ValueError(f"int8 quantization starts from float32 weights, not {self.dtype}")
        if self._head_int8 is not None:
            return
        with self._lock, torch.no_grad():
            quantize_linears(self._base)
            # In place, so that a tied embedding table (Gemma's) changes with it.
            self._head_int8 = Int8Weights(self._w, in_place=True)
            self.weights = "int8"
            self._reset_state()
        self.probe_logits = self._check_head()

    # -- the backend's parts -----------------------------------------------------

    def _new_cache(self):
        from transformers import DynamicCache

        # No config: every layer keeps all positions, so the cache can be cropped to any
        # earlier prefix (see the module docstring).
        cache = DynamicCache()
        cache.layer_class_to_replicate = _growable_layer_class()
        return cache

    def _forward(self, ids, pos, see):
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self._base(
                input_ids=torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))[None],
                position_ids=torch.from_numpy(np.ascontiguousarray(pos, dtype=np.int64))[None],
                attention_mask=None if see is None else self._additive_masks(see),
                past_key_values=self._cache,
                use_cache=True,
            )
            hidden = out.last_hidden_state[0].float().numpy()
        self.stats.forward_passes += 1
        self.stats.tokens_prefilled += int(ids.shape[0])
        self.stats.forward_seconds += time.perf_counter() - t0
        return hidden

    def _additive_masks(self, see: dict[str, np.ndarray]):
        """transformers' additive 4-D mask(s) for `see` (one tensor when the model has
        one kind of layer, else a dict by kind)."""
        neg = torch.finfo(self.dtype).min
        masks = {}
        for kind, allowed in see.items():
            m = torch.zeros((1, 1, *allowed.shape), dtype=self.dtype)
            m.masked_fill_(torch.from_numpy(~allowed)[None, None], neg)
            masks[kind] = m
        if len(masks) == 1:
            return next(iter(masks.values()))
        return masks

    def _head(self, hidden: np.ndarray, ids: np.ndarray | None) -> np.ndarray:
        """Logits for each row of `hidden`: over the whole vocabulary, or at `ids`."""
        t0 = time.perf_counter()
        with torch.inference_mode():
            h = torch.from_numpy(np.ascontiguousarray(hidden, dtype=np.float32))
            if ids is None:
                if self._head_int8 is not None:
                    logits = torch.from_numpy(self._head_int8.matmul(h.numpy(), threads=torch.get_num_threads()))
                    if self._b is not None:
                        logits = logits + self._b
                else:
                    logits = torch.nn.functional.linear(h.to(self.dtype), self._w, self._b)
                self.stats.full_head_rows += int(hidden.shape[0])
            else:
                index = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))
                w = self._w.index_select(0, index)
                b = None if self._b is None else self._b.index_select(0, index)
                logits = torch.nn.functional.linear(h.to(self.dtype), w, b)
                self.stats.restricted_head_rows += int(hidden.shape[0])
            if self._softcap:
                logits = torch.tanh(logits / self._softcap) * self._softcap
            out = logits.float().numpy()
        self.stats.head_seconds += time.perf_counter() - t0
        return out

    def _check_head(self) -> np.ndarray:
        """Run the model's own forward on the probe and check that body + our head agree.

        Returns the model's full logits after the probe (the cache's reference values)."""
        probe = as_token_array(self.probe_tokens, "probe_tokens", self.vocab_size)
        ids = torch.from_numpy(probe[None])
        try:
            with torch.inference_mode():
                try:
                    ref = self._model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1]
                except TypeError:
                    ref = self._model(input_ids=ids, use_cache=False).logits[0, -1]
                hidden = self._base(input_ids=ids, use_cache=False).last_hidden_state[0, -1:].float().numpy()
        except Exception as exc:
            raise ModelUnavailable(f"model {self.name!r} failed its first forward pass: {exc}") from exc
        ref = ref.float().numpy()
        if not np.isfinite(ref).all():
            raise ModelUnavailable(f"model {self.name!r} gives non-finite logits: its weights are damaged")
        # The top candidates plus rows spread over the vocabulary.
        top = np.argpartition(-ref, 16)[:16]
        sample = np.unique(np.concatenate([top, np.linspace(0, self.vocab_size - 1, 48).astype(np.int64)]))
        mine = self._head(hidden, sample)[0]
        # One bfloat16 rounding of a logit of size |x| is up to |x| * 2**-8.
        eps = 1e-3 if self.dtype == torch.float32 else 2.0**-7
        tol = eps * (1.0 + float(np.abs(ref).max()))
        err = float(np.abs(mine - ref[sample]).max())
        self.stats.reset()
        if err > tol:
            raise ModelUnavailable(
                f"model {self.name!r}: midword's head computation differs from the model's own logits by "
                f"{err:.3g} (tolerance {tol:.3g}); this architecture's output layer is not supported"
            )
        return ref


_GROWABLE = None


def _growable_layer_class():
    """transformers' DynamicLayer grows by concatenation, copying the whole cache of every
    layer at every decode step (55 MB per step at 1,500 tokens for Gemma 3 270M). This one
    keeps a doubling buffer and hands attention views of its filled part; cropping only
    moves the end. Made on first use so that importing this module stays cheap."""
    global _GROWABLE
    if _GROWABLE is not None:
        return _GROWABLE
    from transformers.cache_utils import DynamicLayer

    class GrowableLayer(DynamicLayer):
        def lazy_initialization(self, key_states, value_states, *args, **kwargs):
            super().lazy_initialization(key_states, value_states, *args, **kwargs)
            self._filled = 0
            self._key_buffer = self._value_buffer = None

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = self._filled
            need = n + key_states.shape[-2]
            if self._key_buffer is None or need > self._key_buffer.shape[-2]:
                capacity = max(need, 256, 2 * (0 if self._key_buffer is None else self._key_buffer.shape[-2]))
                keys = key_states.new_empty((*key_states.shape[:-2], capacity, key_states.shape[-1]))
                values = value_states.new_empty((*value_states.shape[:-2], capacity, value_states.shape[-1]))
                if n:
                    keys[..., :n, :] = self._key_buffer[..., :n, :]
                    values[..., :n, :] = self._value_buffer[..., :n, :]
                self._key_buffer, self._value_buffer = keys, values
            self._key_buffer[..., n:need, :] = key_states
            self._value_buffer[..., n:need, :] = value_states
            self._filled = need
            self.keys = self._key_buffer[..., :need, :]
            self.values = self._value_buffer[..., :need, :]
            return self.keys, self.values

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError(f"crop takes a negative count of tokens to remove, not {tokens_to_remove}")
            if tokens_to_remove == 0 or not self.is_initialized:
                return
            self._filled = max(0, self._filled + tokens_to_remove)
            self.keys = self._key_buffer[..., : self._filled, :]
            self.values = self._value_buffer[..., : self._filled, :]

        def reset(self) -> None:
            self._key_buffer = self._value_buffer = None
            self._filled = 0
            super().reset()

    _GROWABLE = GrowableLayer
    return _GROWABLE


def _base_model(hf_model):
    """The transformer body: the module that returns normalised hidden states."""
    prefix = getattr(hf_model, "base_model_prefix", "")
    base = getattr(hf_model, prefix, None) if prefix else None
    if base is None or base is hf_model:
        get = getattr(hf_model, "get_decoder", None)
        base = get() if get is not None else None
    if base is None or base is hf_model:
        raise ModelUnavailable(f"{type(hf_model).__name__} has no separate transformer body; not a supported causal LM")
    return base


def _mask_kinds(config):
    """Which attention masks a token tree needs: (kinds, sliding window), or None when the
    architecture has layers a plain 4-D mask cannot describe."""
    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return None
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types:
        kinds = tuple(sorted(set(types)))
        if not set(kinds) <= {"full_attention", "sliding_attention"}:
            return None
        if "sliding_attention" in kinds and not window:
            return None
        return kinds, window
    if window and getattr(config, "use_sliding_window", True):
        return ("sliding_attention",), window
    return ("full_attention",), None


__all__ = ["TransformersModel", "ModelState", "torch_dtype"]
