"""The transformers backend of `LanguageModel`: one KV cache, a sparse head, token trees.

State is a single sequence: the tokens whose keys and values sit in a `DynamicCache`,
plus the final hidden state at every one of those positions. A request finds the longest
common prefix with that sequence, drops the rest and prefills only the new tail (in
chunks, so a long prompt never builds one huge attention matrix). Because every hidden
state is kept, going *back* (the user deleted a character) costs no forward pass at all,
and cropping is lazy: a shorter request leaves the longer cache in place until a request
diverges from it.

The cache holds every position of every layer, also for sliding-window layers (Gemma 3
attends to the last 512 tokens in five layers of six): transformers' windowed cache
layers drop old keys and so cannot be rolled back to an earlier prefix. The window is
applied by the attention mask instead, so results equal a fresh forward pass.

The head is applied here rather than inside the model: the body returns normalised hidden
states and logits are `hidden @ W.T` (+ bias, then Gemma 2's soft-capping when the config
asks for it) over all rows of W or only the allowed ones. The model's own forward is run
once at load time on a probe prompt to check that both agree.

Branches for CPC are scored as one token tree in one forward pass: the branches' tokens
are merged into a trie (branches that start alike share nodes), laid out after the cached
sequence, and given a 4-D attention mask in which a node sees the prefix and its own
ancestors. Position ids are the depth after the prefix. Compared with a batch of padded
branches this copies no part of the prefix's cache (a batch needs one copy per row) and
computes shared branch prefixes once. Afterwards the tree's entries are cropped off the
cache again. Architectures whose layer kinds the mask cannot describe are scored branch
by branch instead.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import torch

from midword.engine.limits import LimitExceeded

from .model import BranchScore, ModelStats, ModelUnavailable

if TYPE_CHECKING:
    from .quantized import Int8Weights

_PROBE_TEXT = "def add(a, b):\n    return a +"
# Prefill chunk: large enough for efficient matmuls, small enough that the attention
# scores of one chunk (chunk x context per head) stay a few MB.
_PREFILL_CHUNK = 512
# Full log-prob rows kept by next_logprobs (1 MB each for Gemma's 262k tokens).
_ROW_CACHE_SIZE = 16
_BRANCH_CACHE_SIZE = 32
# A cancellable prefill checks between chunks this long (~0.2 s on a laptop core).
_CANCELLABLE_CHUNK = 64
# Head rows computed at once over the full vocabulary (each row is vocab_size floats).
_HEAD_ROWS = 32
# The tree's masks are nodes x (context + nodes) floats, so the node count is bounded.
_DEFAULT_MAX_BRANCH_NODES = 1024
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype must be one of {', '.join(map(repr, _DTYPES))}, not {name!r}") from None


def _as_token_array(tokens, what: str, vocab_size: int, allow_empty: bool = False) -> np.ndarray:
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a flat sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        if not allow_empty:
            raise ValueError(f"{what} is empty: a model needs at least one token (start with the BOS token)")
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        if arr.dtype == object and all(isinstance(t, (int, np.integer)) for t in arr):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{what} must hold integer token ids, got {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    bad = np.flatnonzero((arr < 0) | (arr >= vocab_size))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{what}[{i}] = {int(arr[i])} is not a token id (vocab_size {vocab_size})")
    return arr


class ModelState:
    """A parked KV cache (see `TransformersModel.swap_state`): opaque but for the token
    sequence it holds and the memory it takes."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict):
        self.fields = fields

    @property
    def tokens(self) -> np.ndarray:
        return self.fields["_tokens"]

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors and arrays it holds (shared storage counted once)."""
        return _nbytes(self.fields, set(), 4)


def _nbytes(obj, seen: set, depth: int) -> int:
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = ("t", storage.data_ptr())
        if key in seen:
            return 0
        seen.add(key)
        return int(storage.nbytes())
    if isinstance(obj, np.ndarray):
        base = obj
        while isinstance(base.base, np.ndarray):
            base = base.base
        key = ("a", id(base))
        if key in seen:
            return 0
        seen.add(key)
        return int(base.nbytes)
    if depth <= 0 or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return 0
    items: Iterable[Any]
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif hasattr(obj, "__dict__"):  # a cache object: its tensors, its layers
        items = vars(obj).values()
    else:
        return 0
    return sum(_nbytes(x, seen, depth - 1) for x in items)


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    m = min(a.size, b.size)
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


class _Tree:
    """Branches merged into a trie of token nodes in topological order (parent first)."""

    def __init__(self, branches: list[np.ndarray], max_nodes: int):
        index: dict[tuple[int, int], int] = {}
        self.token: list[int] = []
        self.parent: list[int] = []  # -1: the prefix end
        self.depth: list[int] = []  # 1 for a node right after the prefix
        self.ends: list[int] = []  # node where each branch ends (-1 for an empty branch)
        for branch in branches:
            node = -1
            for t in branch.tolist():
                key = (node, t)
                nxt = index.get(key)
                if nxt is None:
                    if len(self.token) >= max_nodes:
                        raise LimitExceeded(
                            "max_branch_nodes", max_nodes, f"{len(branches)} branches need more distinct tree nodes"
                        )
                    nxt = len(self.token)
                    index[key] = nxt
                    self.token.append(t)
                    self.parent.append(node)
                    self.depth.append(1 if node < 0 else self.depth[node] + 1)
                node = nxt
            self.ends.append(node)

    def __len__(self):
        return len(self.token)

    def ancestors(self) -> np.ndarray:
        """n x n booleans: [i, j] when node j is node i or one of its ancestors."""
        n = len(self.token)
        anc = np.zeros((n, n), dtype=bool)
        for i, p in enumerate(self.parent):
            if p >= 0:
                anc[i] = anc[p]
            anc[i, i] = True
        return anc


class TransformersModel:
    """A transformers causal LM behind the `LanguageModel` protocol (see the module docstring)."""

    def __init__(
        self,
        hf_model,
        tokenizer,
        *,
        name: str,
        max_context: int | None = None,
        max_branch_nodes: int = _DEFAULT_MAX_BRANCH_NODES,
        prefill_chunk: int = _PREFILL_CHUNK,
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
        with torch.inference_mode():
            self.probe_tokens = list(probe_tokens) if probe_tokens is not None else self.encode_prompt(_PROBE_TEXT)
            self.probe_logits: np.ndarray | None = self._check_head()

    # Which body computes the forward; LeanGemma3 says "lean".
    backend = "transformers"
    # Why the lean forward was not used for this model (set by the loader), or None.
    lean_problem: str | None = None

    def __repr__(self):
        return f"TransformersModel({self.name!r}, vocab_size={self.vocab_size}, weights={self.weights})"

    def quantize_int8(self) -> None:
        """Store every linear layer and the output head as int8 weights in groups of 64
        (float32 activations; see completion/quantized.py). Decode steps then read a
        quarter of the bytes. Tied input embeddings take the same dequantized values, so
        the model stays one consistent set of weights; the probe check is run again."""
        from .quantized import Int8Weights, quantize_linears

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
        with torch.inference_mode():
            self.probe_logits = self._check_head()

    # -- public API ------------------------------------------------------------

    def encode_prompt(self, text: str | bytes) -> list[int]:
        """`text` spelled by the tokenizer, after the BOS token when the tokenizer has one."""
        ids = self.tokenizer.encode(text)
        return ([self.bos_token_id] if self.bos_token_id is not None else []) + ids

    @property
    def cached_tokens(self) -> tuple[int, ...]:
        """The sequence whose keys and values are cached now."""
        return tuple(self._tokens.tolist())

    def is_cached(self, tokens: Sequence[int]) -> bool:
        """Whether the cache holds a sequence that starts with `tokens` (their next-token
        logits then cost only the head)."""
        n = len(tokens)
        if n == 0 or n > self._tokens.size:
            return False
        return bool(np.array_equal(self._tokens[:n], np.asarray(tokens, dtype=np.int64)))

    def reset(self) -> None:
        """Drop the KV cache (the next request prefills from scratch)."""
        with self._lock:
            self._reset_state()

    # What `_reset_state` sets up: the KV cache and everything keyed by the cached sequence.
    # `swap_state` moves these as one; a test checks `_reset_state` (here and in
    # subclasses) sets nothing else.
    STATE_FIELDS = ("_cache", "_row_cache", "_branch_cache", "_tokens", "_hidden_buffer", "_hidden")

    def swap_state(self, state: "ModelState | None" = None) -> "ModelState":
        """Parks the current KV cache (and the rows cached for its sequence), returning it,
        and installs `state` (an earlier return value) or, with None, an empty one. A
        server keeps one state per document this way, so switching between documents
        does not prefill each again."""
        with self._lock:
            current = ModelState({name: getattr(self, name) for name in self.STATE_FIELDS})
            if state is None:
                self._reset_state()
            else:
                for name, value in state.fields.items():
                    setattr(self, name, value)
            return current

    def prefill(self, tokens: Sequence[int], cancelled=None) -> bool:
        """Bring `tokens` into the KV cache ahead of the calls that need them, polling
        `cancelled()` between chunks of `_CANCELLABLE_CHUNK` tokens. Returns False when
        cancelled; what was prefilled by then stays cached for the next request."""
        toks = _as_token_array(tokens, "tokens", self.vocab_size)
        with self._lock, torch.inference_mode():
            return self._ensure(toks, cancelled)

    def next_logits(self, tokens: Sequence[int], allowed: np.ndarray | None = None) -> np.ndarray:
        """float32 logits for the token after `tokens`: all of them, or the `allowed` ids in order."""
        toks = _as_token_array(tokens, "tokens", self.vocab_size)
        ids = self._allowed(allowed, "allowed")
        with self._lock, torch.inference_mode():
            self._ensure(toks)
            h = self._hidden[toks.size - 1 : toks.size]
            return self._head(h, ids)[0].float().numpy()

    def next_logprobs(self, tokens: Sequence[int], allowed: np.ndarray | None = None) -> np.ndarray:
        """log p(next token | tokens), normalised over the whole vocabulary; at `allowed` ids if given."""
        toks = _as_token_array(tokens, "tokens", self.vocab_size)
        ids = self._allowed(allowed, "allowed")
        with self._lock, torch.inference_mode():
            # Keystrokes inside one word share the prompt before it: CPC asks for the same
            # full row again and again, and a full head row is the price of a decode step.
            key = toks.tobytes()
            lp = self._row_cache.get(key)
            if lp is None:
                self._ensure(toks)
                h = self._hidden[toks.size - 1 : toks.size]
                lp = torch.log_softmax(self._head(h, None).float(), dim=-1)[0]
                self._row_cache[key] = lp
                while len(self._row_cache) > _ROW_CACHE_SIZE:
                    self._row_cache.popitem(last=False)
            else:
                self._row_cache.move_to_end(key)
                self.stats.cached_rows += 1
            return (lp if ids is None else lp[ids]).numpy()

    def logprobs(self, tokens: Sequence[int], start: int = 1) -> np.ndarray:
        """log p(tokens[i] | tokens[:i]) for i in range(start, len(tokens)), as float32."""
        toks = _as_token_array(tokens, "tokens", self.vocab_size)
        if not 1 <= start <= toks.size:
            raise ValueError(f"start must be between 1 and len(tokens) = {toks.size}, got {start}")
        with self._lock, torch.inference_mode():
            self._ensure(toks)
            out = np.empty(toks.size - start, dtype=np.float32)
            targets = torch.from_numpy(toks)
            for lo in range(start, toks.size, _HEAD_ROWS):
                hi = min(lo + _HEAD_ROWS, toks.size)
                lp = torch.log_softmax(self._head(self._hidden[lo - 1 : hi - 1], None).float(), dim=-1)
                out[lo - start : hi - start] = lp.gather(1, targets[lo:hi, None])[:, 0].numpy()
            return out

    def score_branches(
        self,
        prefix: Sequence[int],
        branches: Sequence[Sequence[int]],
        allowed: Sequence[np.ndarray | None] | None = None,
    ) -> list[BranchScore]:
        """Score each branch (a token list after `prefix`); see `BranchScore`.

        `allowed[j]` restricts branch j's `next_logprobs` to those ids (None: the whole
        vocabulary). All branches are computed in one forward pass over a token tree.
        """
        pre = _as_token_array(prefix, "prefix", self.vocab_size)
        if isinstance(branches, np.ndarray) and branches.ndim == 1 and branches.dtype.kind in "iu":
            raise TypeError("branches must be a list of token lists, not one flat token list")
        brs = [_as_token_array(b, f"branches[{j}]", self.vocab_size, allow_empty=True) for j, b in enumerate(branches)]
        if allowed is None:
            allowed_ids: list[torch.Tensor | None] = [None] * len(brs)
        else:
            if len(allowed) != len(brs):
                raise ValueError(f"allowed has {len(allowed)} entries for {len(brs)} branches")
            allowed_ids = [self._allowed(a, f"allowed[{j}]") for j, a in enumerate(allowed)]
        if not brs:
            return []
        tree = _Tree(brs, self.max_branch_nodes)
        deepest = max(tree.depth, default=0)
        if pre.size + deepest > self.max_context:
            raise LimitExceeded(
                "max_context", self.max_context, f"prefix of {pre.size} tokens plus a branch of {deepest}"
            )
        with self._lock, torch.inference_mode():
            # Successive keystrokes inside a word score many of the same branches (the
            # splits of the typed text they share): those come from memory, exactly.
            base = pre.tobytes() + b"|"
            keys = [base + b.tobytes() for b in brs]
            found = {k: self._branch_cache[k] for k in keys if k in self._branch_cache}
            todo = [j for j, k in enumerate(keys) if k not in found]
            if todo:
                fresh = [brs[j] for j in todo]
                tree = _Tree(fresh, self.max_branch_nodes)
                self._ensure(pre)
                rows = self._hidden[pre.size - 1 : pre.size]
                if len(tree):
                    rows = torch.cat([rows, self._tree_hidden(pre.size, tree)])
                first = self._row_cache.get(pre.tobytes())
                for j, score in zip(
                    todo, self._branch_scores(rows, tree, fresh, [None] * len(todo), first), strict=False
                ):
                    found[keys[j]] = (score.token_logprobs, torch.from_numpy(score.next_logprobs))
            self.stats.cached_rows += len(brs) - len(todo)
            for k in keys:
                self._branch_cache[k] = found[k]
                self._branch_cache.move_to_end(k)
            while len(self._branch_cache) > _BRANCH_CACHE_SIZE:
                self._branch_cache.popitem(last=False)
            out = []
            for j, branch in enumerate(brs):
                token_lp, row = found[keys[j]]
                ids = allowed_ids[j]
                out.append(
                    BranchScore(
                        tokens=tuple(branch.tolist()),
                        token_logprobs=token_lp.copy(),
                        next_logprobs=(row if ids is None else row[ids]).numpy().copy(),
                        allowed=None if ids is None else ids.numpy(),
                    )
                )
            return out

    # -- the cache -------------------------------------------------------------

    def _reset_state(self):
        from transformers import DynamicCache

        # No config: every layer keeps all positions, so the cache can be cropped to any
        # earlier prefix (see the module docstring).
        self._cache = DynamicCache()
        self._cache.layer_class_to_replicate = _growable_layer_class()
        # Full log-prob rows by token sequence (exact: the same weights give the same row).
        self._row_cache: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        # (prefix, branch) -> (token log-probs, full next-token log-prob row)
        self._branch_cache: OrderedDict[bytes, tuple] = OrderedDict()
        self._tokens = np.zeros(0, dtype=np.int64)
        self._hidden_buffer = torch.zeros((0, int(self._w.shape[1])), dtype=self.dtype)
        self._hidden = self._hidden_buffer[:0]

    def _append_hidden(self, rows: torch.Tensor) -> None:
        # A doubling buffer: appending one decode step's row must not copy every row before it.
        n = self._hidden.shape[0]
        need = n + rows.shape[0]
        if need > self._hidden_buffer.shape[0]:
            grown = torch.empty((max(need, 2 * self._hidden_buffer.shape[0], 256), rows.shape[1]), dtype=self.dtype)
            grown[:n] = self._hidden
            self._hidden_buffer = grown
        self._hidden_buffer[n:need] = rows
        self._hidden = self._hidden_buffer[:need]

    def _crop(self, keep: int):
        """Forget everything after the first `keep` cached tokens."""
        drop = self._tokens.size - keep
        if drop <= 0:
            return
        if keep == 0:
            self._reset_state()
            return
        # A negative count removes that many entries in every transformers version.
        self._cache.crop(-drop)
        self._tokens = self._tokens[:keep]
        self._hidden = self._hidden[:keep]

    def _ensure(self, toks: np.ndarray, cancelled=None) -> bool:
        """Make the cache hold a sequence that starts with `toks`, prefilling what is
        missing; False when `cancelled()` turned true between chunks."""
        n = toks.size
        if n > self.max_context:
            raise LimitExceeded("max_context", self.max_context, f"a sequence of {n} tokens")
        k = _common_prefix(toks, self._tokens)
        if k:
            self.stats.cache_hits += 1
            self.stats.tokens_reused += k
        if k == n:
            return True
        self._crop(k)
        step = self.prefill_chunk if cancelled is None else min(self.prefill_chunk, _CANCELLABLE_CHUNK)
        try:
            for lo in range(k, n, step):
                if cancelled is not None and cancelled():
                    return False
                hi = min(lo + step, n)
                ids = torch.from_numpy(toks[None, lo:hi])
                pos = torch.arange(lo, hi, dtype=torch.long)[None]
                hidden = self._forward(ids, pos, None)
                self._append_hidden(hidden[0])
                self._tokens = toks[:hi].copy()
        except BaseException:
            # A forward pass that stopped half way leaves layers of different lengths.
            self._reset_state()
            raise
        return True

    def _forward(self, ids, pos, mask):
        t0 = time.perf_counter()
        out = self._base(
            input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=self._cache, use_cache=True
        )
        self.stats.forward_passes += 1
        self.stats.tokens_prefilled += int(ids.shape[1])
        self.stats.forward_seconds += time.perf_counter() - t0
        return out.last_hidden_state

    # -- the head --------------------------------------------------------------

    def _allowed(self, allowed, what: str) -> torch.Tensor | None:
        if allowed is None:
            return None
        arr = _as_token_array(allowed, what, self.vocab_size, allow_empty=True)
        return torch.from_numpy(np.ascontiguousarray(arr))

    def _head(self, hidden: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor:
        """Logits for each row of `hidden`: over the whole vocabulary, or at `ids`."""
        t0 = time.perf_counter()
        if ids is None:
            if self._head_int8 is not None:
                logits = self._head_int8.matmul(hidden)
                if self._b is not None:
                    logits = logits + self._b
            else:
                logits = torch.nn.functional.linear(hidden, self._w, self._b)
            self.stats.full_head_rows += int(hidden.shape[0])
        else:
            w = self._w.index_select(0, ids)
            logits = torch.nn.functional.linear(hidden, w, None if self._b is None else self._b.index_select(0, ids))
            self.stats.restricted_head_rows += int(hidden.shape[0])
        if self._softcap:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        self.stats.head_seconds += time.perf_counter() - t0
        return logits

    def _check_head(self) -> np.ndarray:
        """Run the model's own forward on the probe and check that body + our head agree.

        Returns the model's full logits after the probe (the cache's reference values)."""
        probe = _as_token_array(self.probe_tokens, "probe_tokens", self.vocab_size)
        ids = torch.from_numpy(probe[None])
        try:
            try:
                ref = self._model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1]
            except TypeError:
                ref = self._model(input_ids=ids, use_cache=False).logits[0, -1]
            hidden = self._base(input_ids=ids, use_cache=False).last_hidden_state[0, -1:]
        except Exception as exc:
            raise ModelUnavailable(f"model {self.name!r} failed its first forward pass: {exc}") from exc
        ref = ref.float()
        if not torch.isfinite(ref).all():
            raise ModelUnavailable(f"model {self.name!r} gives non-finite logits: its weights are damaged")
        # The top candidates plus rows spread over the vocabulary.
        sample = torch.unique(torch.cat([ref.topk(16).indices, torch.linspace(0, self.vocab_size - 1, 48).long()]))
        mine = self._head(hidden, sample)[0].float()
        # One bfloat16 rounding of a logit of size |x| is up to |x| * 2**-8.
        eps = 1e-3 if self.dtype == torch.float32 else 2.0**-7
        tol = eps * (1.0 + ref.abs().max().item())
        err = (mine - ref[sample]).abs().max().item()
        self.stats.reset()
        if err > tol:
            raise ModelUnavailable(
                f"model {self.name!r}: midword's head computation differs from the model's own logits by "
                f"{err:.3g} (tolerance {tol:.3g}); this architecture's output layer is not supported"
            )
        return ref.numpy()

    # -- branches --------------------------------------------------------------

    def _tree_hidden(self, p: int, tree: _Tree) -> torch.Tensor:
        """Hidden states of the tree's nodes laid after the first `p` cached tokens."""
        prefix = self._tokens[:p].copy()
        if self._tree_ok:
            c = self._tokens.size
            try:
                mask = self._tree_mask(p, c, tree)
                ids = torch.tensor([tree.token], dtype=torch.long)
                pos = torch.tensor([[p + d - 1 for d in tree.depth]], dtype=torch.long)
                hidden = self._forward(ids, pos, mask)[0]
            except Exception:
                # The architecture did not take the mask, and its cache may be half updated:
                # score branch by branch from now on.
                self._tree_ok = False
                self._reset_state()
                self._ensure(prefix)
            except BaseException:
                self._reset_state()
                raise
            else:
                self._cache.crop(-len(tree))
                return hidden
        return self._tree_hidden_sequential(prefix, tree)

    def _tree_hidden_sequential(self, prefix: np.ndarray, tree: _Tree) -> torch.Tensor:
        out = torch.empty((len(tree), int(self._w.shape[1])), dtype=self.dtype)
        # Depth-first order keeps consecutive requests sharing as much as possible.
        paths: list[list[int]] = [[] for _ in tree.token]
        for i, parent in enumerate(tree.parent):
            paths[i] = (paths[parent] if parent >= 0 else []) + [tree.token[i]]
        for i in sorted(range(len(tree)), key=lambda i: paths[i]):
            seq = np.concatenate([prefix, np.asarray(paths[i], dtype=np.int64)])
            self._ensure(seq)
            out[i] = self._hidden[seq.size - 1]
        return out

    def _tree_mask(self, p: int, c: int, tree: _Tree):
        """Additive 4-D mask(s) for the tree's nodes over [cache (c tokens), tree]."""
        n = len(tree)
        q_pos = p + np.asarray(tree.depth, dtype=np.int64) - 1
        k_pos = np.concatenate([np.arange(c, dtype=np.int64), q_pos])
        see = np.zeros((n, c + n), dtype=bool)
        # Nodes see the prefix, not the cached tokens after it (another sequence's), and
        # of the tree only their own ancestors.
        see[:, :p] = True
        see[:, c:] = tree.ancestors()
        neg = torch.finfo(self.dtype).min

        def as_mask(allowed: np.ndarray):
            m = torch.zeros((1, 1, n, c + n), dtype=self.dtype)
            m.masked_fill_(torch.from_numpy(~allowed)[None, None], neg)
            return m

        kinds, window = self._mask_kinds
        masks = {}
        for kind in kinds:
            if kind == "sliding_attention":
                masks[kind] = as_mask(see & (q_pos[:, None] - k_pos[None, :] < window))
            else:
                masks[kind] = as_mask(see)
        if len(kinds) == 1:
            return next(iter(masks.values()))
        return masks

    def _branch_scores(self, rows: torch.Tensor, tree: _Tree, brs, allowed_ids, first=None) -> list[BranchScore]:
        """`first`: the prefix end's full log-prob row when it is known already."""
        # Row 0 is the prefix end; row i + 1 is tree node i.
        children: list[list[int]] = [[] for _ in range(rows.shape[0])]
        for i, parent in enumerate(tree.parent):
            children[parent + 1].append(i)
        ending: list[list[int]] = [[] for _ in range(rows.shape[0])]
        for j, end in enumerate(tree.ends):
            ending[end + 1].append(j)
        node_lp = np.zeros(len(tree), dtype=np.float32)
        next_lp: list[np.ndarray | None] = [None] * len(brs)
        tokens = torch.tensor(tree.token, dtype=torch.long)
        for lo in range(0, rows.shape[0], _HEAD_ROWS):
            hi = min(lo + _HEAD_ROWS, rows.shape[0])
            if lo == 0 and first is not None:
                rest = rows[1:hi]
                tail = torch.log_softmax(self._head(rest, None).float(), dim=-1) if rest.shape[0] else first[None][:0]
                lp = torch.cat([first[None], tail])
            else:
                lp = torch.log_softmax(self._head(rows[lo:hi], None).float(), dim=-1)
            for r in range(lo, hi):
                row = lp[r - lo]
                if children[r]:
                    kids = children[r]
                    node_lp[kids] = row[tokens[kids]].numpy()
                for j in ending[r]:
                    ids = allowed_ids[j]
                    next_lp[j] = (row if ids is None else row[ids]).numpy().copy()
        out = []
        for j, branch in enumerate(brs):
            path = []
            node = tree.ends[j]
            while node >= 0:
                path.append(node)
                node = tree.parent[node]
            path.reverse()
            ids = allowed_ids[j]
            next_row = next_lp[j]
            assert next_row is not None  # every branch ends at some row of the tree
            out.append(
                BranchScore(
                    tokens=tuple(branch.tolist()),
                    token_logprobs=node_lp[path].copy(),
                    next_logprobs=next_row,
                    allowed=None if ids is None else ids.numpy(),
                )
            )
        return out


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
