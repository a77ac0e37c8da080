"""What every model backend shares behind the `LanguageModel` protocol: one KV cache, a
sparse head, token trees. numpy only: the lean forward serves without torch.

State is a single sequence: the tokens whose keys and values sit in the backend's cache,
plus the final hidden state at every one of those positions (float32 rows). A request
finds the longest common prefix with that sequence, drops the rest and prefills only the
new tail (in chunks, so a long prompt never builds one huge attention matrix). Because
every hidden state is kept, going *back* (the user deleted a character) costs no forward
pass at all, and cropping is lazy: a shorter request leaves the longer cache in place
until a request diverges from it.

The cache holds every position of every layer, also for sliding-window layers (Gemma 3
attends to the last 512 tokens in five layers of six), so it can be rolled back to any
earlier prefix; the window is applied by the attention mask instead, and results equal a
fresh forward pass.

The head is applied here rather than inside the model: the body returns normalised hidden
states and logits are `hidden @ W.T` (+ bias, then soft-capping when the config asks for
it) over all rows of W or only the allowed ones.

Branches for CPC are scored as one token tree in one forward pass: the branches' tokens
are merged into a trie (branches that start alike share nodes), laid out after the cached
sequence, and given an attention mask in which a node sees the prefix and its own
ancestors. Position ids are the depth after the prefix. Compared with a batch of padded
branches this copies no part of the prefix's cache (a batch needs one copy per row) and
computes shared branch prefixes once. Afterwards the tree's entries are cropped off the
cache again. Architectures whose layer kinds the mask cannot describe are scored branch
by branch instead.

A backend supplies `_forward` (hidden rows of new tokens appended to its cache), `_head`
(logits of hidden rows), `_reset_state` (an empty cache) and its cache's `crop`.
"""

from __future__ import annotations

import abc
import threading
from collections import OrderedDict
from typing import Any, Iterable, Sequence

import numpy as np

from midword.engine.limits import LimitExceeded

from .model import BranchScore, ModelStats

# Prefill chunk: large enough for efficient matmuls, small enough that the attention
# scores of one chunk (chunk x context per head) stay a few MB.
PREFILL_CHUNK = 512
# Full log-prob rows kept by next_logprobs (1 MB each for Gemma's 262k tokens).
ROW_CACHE_SIZE = 16
BRANCH_CACHE_SIZE = 32
# A cancellable prefill checks between chunks this long (~0.2 s on a laptop core).
CANCELLABLE_CHUNK = 64
# Head rows computed at once over the full vocabulary (each row is vocab_size floats).
HEAD_ROWS = 32
# The tree's masks are nodes x (context + nodes) booleans, so the node count is bounded.
DEFAULT_MAX_BRANCH_NODES = 1024


def as_token_array(tokens, what: str, vocab_size: int, allow_empty: bool = False) -> np.ndarray:
    if hasattr(tokens, "detach") and hasattr(tokens, "numpy"):  # a torch tensor, without importing torch
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


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float32 (the max is subtracted first, so large logits stay finite)."""
    x = np.asarray(logits, dtype=np.float32)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class ModelState:
    """A parked KV cache (see `CachedModel.swap_state`): opaque but for the token
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
    storage = getattr(obj, "untyped_storage", None)  # a torch tensor (the transformers cache)
    if storage is not None:
        st = storage()
        key = ("t", st.data_ptr())
        if key in seen:
            return 0
        seen.add(key)
        return int(st.nbytes())
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
    elif hasattr(obj, "__dict__"):  # a cache object: its arrays, its layers
        items = vars(obj).values()
    else:
        return 0
    return sum(_nbytes(x, seen, depth - 1) for x in items)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    m = min(a.size, b.size)
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


class TokenTree:
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


class CachedModel(abc.ABC):
    """The `LanguageModel` protocol over a backend's forward and head (see the module
    docstring). Subclasses set, in their constructor: name, tokenizer, stats, source,
    vocab_size, hidden_size, bos_token_id, eos_token_ids, max_context, max_branch_nodes,
    prefill_chunk, _lock (an RLock), _mask_kinds ((kinds, window) or None), _tree_ok."""

    name: str
    tokenizer: Any
    stats: ModelStats
    vocab_size: int
    hidden_size: int
    bos_token_id: int | None
    max_context: int
    max_branch_nodes: int
    prefill_chunk: int
    _lock: threading.RLock
    _mask_kinds: tuple[tuple[str, ...], int | None] | None
    _tree_ok: bool
    _cache: Any
    _tokens: np.ndarray
    _hidden: np.ndarray
    _hidden_buffer: np.ndarray
    _row_cache: OrderedDict
    _branch_cache: OrderedDict

    # Which body computes the forward ("transformers", "lean").
    backend = "?"
    # Why the lean forward was not used for this model (set by the loader), or None.
    lean_problem: str | None = None

    # -- what a backend supplies -------------------------------------------------

    @abc.abstractmethod
    def _new_cache(self):
        """An empty KV cache with `crop(-n)` and `get_seq_length()`."""

    @abc.abstractmethod
    def _forward(self, ids: np.ndarray, pos: np.ndarray, see: dict[str, np.ndarray] | None) -> np.ndarray:
        """Final hidden rows (n, hidden_size) float32 of tokens `ids` (n,) at positions `pos`
        (n,), appended after the cache's positions. `see`: None for a run of consecutive
        positions right after the cache (causal, windowed), else per layer kind the (n,
        cached + n) booleans of which keys each new token attends to (a token tree)."""

    @abc.abstractmethod
    def _head(self, hidden: np.ndarray, ids: np.ndarray | None) -> np.ndarray:
        """float32 logits for each row of `hidden`: over the whole vocabulary, or at `ids`."""

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
        `cancelled()` between chunks of `CANCELLABLE_CHUNK` tokens. Returns False when
        cancelled; what was prefilled by then stays cached for the next request."""
        toks = as_token_array(tokens, "tokens", self.vocab_size)
        with self._lock:
            return self._ensure(toks, cancelled)

    def next_logits(self, tokens: Sequence[int], allowed: np.ndarray | None = None) -> np.ndarray:
        """float32 logits for the token after `tokens`: all of them, or the `allowed` ids in order."""
        toks = as_token_array(tokens, "tokens", self.vocab_size)
        ids = self._allowed(allowed, "allowed")
        with self._lock:
            self._ensure(toks)
            h = self._hidden[toks.size - 1 : toks.size]
            return self._head(h, ids)[0]

    def next_logprobs(self, tokens: Sequence[int], allowed: np.ndarray | None = None) -> np.ndarray:
        """log p(next token | tokens), normalised over the whole vocabulary; at `allowed` ids if given."""
        toks = as_token_array(tokens, "tokens", self.vocab_size)
        ids = self._allowed(allowed, "allowed")
        with self._lock:
            # Keystrokes inside one word share the prompt before it: CPC asks for the same
            # full row again and again, and a full head row is the price of a decode step.
            key = toks.tobytes()
            lp = self._row_cache.get(key)
            if lp is None:
                self._ensure(toks)
                h = self._hidden[toks.size - 1 : toks.size]
                lp = log_softmax(self._head(h, None))[0]
                self._row_cache[key] = lp
                while len(self._row_cache) > ROW_CACHE_SIZE:
                    self._row_cache.popitem(last=False)
            else:
                self._row_cache.move_to_end(key)
                self.stats.cached_rows += 1
            return lp if ids is None else lp[ids]

    def logprobs(self, tokens: Sequence[int], start: int = 1) -> np.ndarray:
        """log p(tokens[i] | tokens[:i]) for i in range(start, len(tokens)), as float32."""
        toks = as_token_array(tokens, "tokens", self.vocab_size)
        if not 1 <= start <= toks.size:
            raise ValueError(f"start must be between 1 and len(tokens) = {toks.size}, got {start}")
        with self._lock:
            self._ensure(toks)
            out = np.empty(toks.size - start, dtype=np.float32)
            for lo in range(start, toks.size, HEAD_ROWS):
                hi = min(lo + HEAD_ROWS, toks.size)
                lp = log_softmax(self._head(self._hidden[lo - 1 : hi - 1], None))
                out[lo - start : hi - start] = lp[np.arange(hi - lo), toks[lo:hi]]
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
        pre = as_token_array(prefix, "prefix", self.vocab_size)
        if isinstance(branches, np.ndarray) and branches.ndim == 1 and branches.dtype.kind in "iu":
            raise TypeError("branches must be a list of token lists, not one flat token list")
        brs = [as_token_array(b, f"branches[{j}]", self.vocab_size, allow_empty=True) for j, b in enumerate(branches)]
        if allowed is None:
            allowed_ids: list[np.ndarray | None] = [None] * len(brs)
        else:
            if len(allowed) != len(brs):
                raise ValueError(f"allowed has {len(allowed)} entries for {len(brs)} branches")
            allowed_ids = [self._allowed(a, f"allowed[{j}]") for j, a in enumerate(allowed)]
        if not brs:
            return []
        tree = TokenTree(brs, self.max_branch_nodes)
        deepest = max(tree.depth, default=0)
        if pre.size + deepest > self.max_context:
            raise LimitExceeded(
                "max_context", self.max_context, f"prefix of {pre.size} tokens plus a branch of {deepest}"
            )
        with self._lock:
            # Successive keystrokes inside a word score many of the same branches (the
            # splits of the typed text they share): those come from memory, exactly.
            base = pre.tobytes() + b"|"
            keys = [base + b.tobytes() for b in brs]
            found = {k: self._branch_cache[k] for k in keys if k in self._branch_cache}
            todo = [j for j, k in enumerate(keys) if k not in found]
            if todo:
                fresh = [brs[j] for j in todo]
                tree = TokenTree(fresh, self.max_branch_nodes)
                self._ensure(pre)
                rows = self._hidden[pre.size - 1 : pre.size]
                if len(tree):
                    rows = np.concatenate([rows, self._tree_hidden(pre.size, tree)])
                first = self._row_cache.get(pre.tobytes())
                for j, score in zip(
                    todo, self._branch_scores(rows, tree, fresh, [None] * len(todo), first), strict=False
                ):
                    found[keys[j]] = (score.token_logprobs, score.next_logprobs)
            self.stats.cached_rows += len(brs) - len(todo)
            for k in keys:
                self._branch_cache[k] = found[k]
                self._branch_cache.move_to_end(k)
            while len(self._branch_cache) > BRANCH_CACHE_SIZE:
                self._branch_cache.popitem(last=False)
            out = []
            for j, branch in enumerate(brs):
                token_lp, row = found[keys[j]]
                ids = allowed_ids[j]
                out.append(
                    BranchScore(
                        tokens=tuple(branch.tolist()),
                        token_logprobs=token_lp.copy(),
                        next_logprobs=(row if ids is None else row[ids]).copy(),
                        allowed=ids,
                    )
                )
            return out

    # -- the cache -------------------------------------------------------------

    def _reset_state(self):
        self._cache = self._new_cache()
        # Full log-prob rows by token sequence (exact: the same weights give the same row).
        self._row_cache = OrderedDict()
        # (prefix, branch) -> (token log-probs, full next-token log-prob row)
        self._branch_cache = OrderedDict()
        self._tokens = np.zeros(0, dtype=np.int64)
        self._hidden_buffer = np.zeros((0, self.hidden_size), dtype=np.float32)
        self._hidden = self._hidden_buffer[:0]

    def _append_hidden(self, rows: np.ndarray) -> None:
        self._hidden_buffer, self._hidden = append_rows(self._hidden_buffer, self._hidden, rows)

    def _crop(self, keep: int):
        """Forget everything after the first `keep` cached tokens."""
        drop = self._tokens.size - keep
        if drop <= 0:
            return
        if keep == 0:
            self._reset_state()
            return
        self._cache.crop(-drop)
        self._tokens = self._tokens[:keep]
        self._hidden = self._hidden[:keep]

    def _ensure(self, toks: np.ndarray, cancelled=None) -> bool:
        """Make the cache hold a sequence that starts with `toks`, prefilling what is
        missing; False when `cancelled()` turned true between chunks."""
        n = toks.size
        if n > self.max_context:
            raise LimitExceeded("max_context", self.max_context, f"a sequence of {n} tokens")
        k = common_prefix(toks, self._tokens)
        if k:
            self.stats.cache_hits += 1
            self.stats.tokens_reused += k
        if k == n:
            return True
        self._crop(k)
        step = self.prefill_chunk if cancelled is None else min(self.prefill_chunk, CANCELLABLE_CHUNK)
        try:
            for lo in range(k, n, step):
                if cancelled is not None and cancelled():
                    return False
                hi = min(lo + step, n)
                hidden = self._forward(toks[lo:hi], np.arange(lo, hi, dtype=np.int64), None)
                self._append_hidden(hidden)
                self._tokens = toks[:hi].copy()
        except BaseException:
            # A forward pass that stopped half way leaves layers of different lengths.
            self._reset_state()
            raise
        return True

    # -- the head --------------------------------------------------------------

    def _allowed(self, allowed, what: str) -> np.ndarray | None:
        if allowed is None:
            return None
        return np.ascontiguousarray(as_token_array(allowed, what, self.vocab_size, allow_empty=True))

    # -- branches --------------------------------------------------------------

    def _tree_hidden(self, p: int, tree: TokenTree) -> np.ndarray:
        """Hidden states of the tree's nodes laid after the first `p` cached tokens."""
        prefix = self._tokens[:p].copy()
        if self._tree_ok:
            c = self._tokens.size
            try:
                see = self._tree_mask(p, c, tree)
                ids = np.asarray(tree.token, dtype=np.int64)
                pos = p + np.asarray(tree.depth, dtype=np.int64) - 1
                hidden = self._forward(ids, pos, see)
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

    def _tree_hidden_sequential(self, prefix: np.ndarray, tree: TokenTree) -> np.ndarray:
        out = np.empty((len(tree), self.hidden_size), dtype=np.float32)
        # Depth-first order keeps consecutive requests sharing as much as possible.
        paths: list[list[int]] = [[] for _ in tree.token]
        for i, parent in enumerate(tree.parent):
            paths[i] = (paths[parent] if parent >= 0 else []) + [tree.token[i]]
        for i in sorted(range(len(tree)), key=lambda i: paths[i]):
            seq = np.concatenate([prefix, np.asarray(paths[i], dtype=np.int64)])
            self._ensure(seq)
            out[i] = self._hidden[seq.size - 1]
        return out

    def _tree_mask(self, p: int, c: int, tree: TokenTree) -> dict[str, np.ndarray]:
        """Per layer kind, which of [cache (c tokens), tree] each tree node attends to."""
        assert self._mask_kinds is not None  # only with _tree_ok
        n = len(tree)
        q_pos = p + np.asarray(tree.depth, dtype=np.int64) - 1
        k_pos = np.concatenate([np.arange(c, dtype=np.int64), q_pos])
        see = np.zeros((n, c + n), dtype=bool)
        # Nodes see the prefix, not the cached tokens after it (another sequence's), and
        # of the tree only their own ancestors.
        see[:, :p] = True
        see[:, c:] = tree.ancestors()
        kinds, window = self._mask_kinds
        masks = {}
        for kind in kinds:
            if kind == "sliding_attention":
                masks[kind] = see & (q_pos[:, None] - k_pos[None, :] < window)
            else:
                masks[kind] = see
        return masks

    def _branch_scores(self, rows: np.ndarray, tree: TokenTree, brs, allowed_ids, first=None) -> list[BranchScore]:
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
        tokens = np.asarray(tree.token, dtype=np.int64)
        for lo in range(0, rows.shape[0], HEAD_ROWS):
            hi = min(lo + HEAD_ROWS, rows.shape[0])
            if lo == 0 and first is not None:
                rest = rows[1:hi]
                tail = log_softmax(self._head(rest, None)) if rest.shape[0] else first[None][:0]
                lp = np.concatenate([first[None], tail])
            else:
                lp = log_softmax(self._head(rows[lo:hi], None))
            for r in range(lo, hi):
                row = lp[r - lo]
                if children[r]:
                    kids = children[r]
                    node_lp[kids] = row[tokens[kids]]
                for j in ending[r]:
                    ids = allowed_ids[j]
                    next_lp[j] = (row if ids is None else row[ids]).copy()
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
                    allowed=ids,
                )
            )
        return out


def append_rows(buffer: np.ndarray, filled: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(buffer, filled view) after appending `rows` to the filled view of a doubling
    buffer: appending one decode step's row must not copy every row before it."""
    n = filled.shape[0]
    need = n + rows.shape[0]
    if need > buffer.shape[0]:
        grown = np.empty((max(need, 2 * buffer.shape[0], 256), rows.shape[1]), dtype=np.float32)
        grown[:n] = filled
        buffer = grown
    buffer[n:need] = rows
    return buffer, buffer[:need]
