"""The flat token trie: every vocabulary token's bytes in one prefix tree, laid out in
DFS order in numpy arrays.

Sorting the token byte strings lexicographically and emitting, for each one, the
bytes past its longest common prefix with the previous token yields exactly the
pre-order of the trie. So node `i` is followed by its first child, and its next
sibling sits at `i + subtree_size[i]`: a walk never chases pointers, it scans the
arrays forward and skips a whole subtree with one addition when a byte is rejected
(docs/design/engine.md). Node 0 is the root (the empty string).

Walks come in pairs: an `@njit` function over flat arrays and a plain-Python twin
with the same signature, which tests compare on random inputs.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._jit import compiled_for, njit, njit_calling

TRIE_FORMAT_VERSION = 1


def mask_words(vocab_size: int) -> int:
    """uint32 words in a token bitmask for `vocab_size` tokens."""
    return (vocab_size + 31) // 32


# A node record (TokenTrie.node_records) holds what the mask walk reads of a node in one
# int64: the byte in bits 0-7, the depth in 8-17, the subtree size in 18-43, and in 44-62
# the token ending there plus one (0: none; RECORD_SEVERAL: several, or an id too large
# for the field, found through tok_start/tok_end). One stream instead of five: the walk
# skips subtrees, and every skip broke the prefetch of five streams at once.
RECORD_DEPTH_SHIFT = 8
RECORD_SUBTREE_SHIFT = 18
RECORD_TOKEN_SHIFT = 44
RECORD_DEPTH_MASK = (1 << 10) - 1
RECORD_SUBTREE_MASK = (1 << 26) - 1
RECORD_TOKEN_MASK = (1 << 19) - 1
RECORD_SEVERAL = RECORD_TOKEN_MASK

# How many of a token's first bytes `TokenTrie.token_heads` keeps.
HEAD_BYTES = 8


@dataclass
class TokenTrie:
    node_byte: np.ndarray  # uint8[n]; node 0 (the root) has no byte
    node_depth: np.ndarray  # int32[n]; the root is depth 0
    subtree_size: np.ndarray  # int32[n]; next sibling = i + subtree_size[i]
    tok_start: np.ndarray  # int32[n]; tokens ending at node i are node_tokens[tok_start[i]:tok_end[i]]
    tok_end: np.ndarray  # int32[n]
    node_tokens: np.ndarray  # int32[m]
    token_node: np.ndarray  # int32[vocab_size]; the node where a token ends, -1 if not in the trie
    vocab_size: int
    fingerprint: str

    @property
    def num_nodes(self) -> int:
        return int(self.node_byte.shape[0])

    @property
    def max_depth(self) -> int:
        # Cached: every mask walker asks, and the scan of all nodes costs ~0.1 ms.
        depth = self.__dict__.get("_max_depth")
        if depth is None:
            depth = int(self.node_depth.max()) if self.num_nodes else 0
            self.__dict__["_max_depth"] = depth
        return depth

    @property
    def node_records(self) -> np.ndarray:
        """int64[n]: each node's byte, depth, subtree size and token in one record (see
        RECORD_*), made on first use."""
        records = self.__dict__.get("_node_records")
        if records is None:
            if self.max_depth > RECORD_DEPTH_MASK:
                raise ValueError(
                    f"a token of {self.max_depth} bytes: the mask walk takes tokens of at most "
                    f"{RECORD_DEPTH_MASK} bytes"
                )
            if self.num_nodes > RECORD_SUBTREE_MASK:
                raise ValueError(f"{self.num_nodes} trie nodes: the mask walk takes at most {RECORD_SUBTREE_MASK}")
            count = (self.tok_end - self.tok_start).astype(np.int64)
            first = (
                self.node_tokens[np.minimum(self.tok_start, max(0, len(self.node_tokens) - 1))].astype(np.int64)
                if len(self.node_tokens)
                else np.zeros(self.num_nodes, dtype=np.int64)
            )
            token = np.where(
                count == 0, 0, np.where((count == 1) & (first + 1 < RECORD_SEVERAL), first + 1, RECORD_SEVERAL)
            )
            records = (
                self.node_byte.astype(np.int64)
                | (self.node_depth.astype(np.int64) << RECORD_DEPTH_SHIFT)
                | (self.subtree_size.astype(np.int64) << RECORD_SUBTREE_SHIFT)
                | (token << RECORD_TOKEN_SHIFT)
            )
            self.__dict__["_node_records"] = records
        return records

    @property
    def deepest_below(self) -> np.ndarray:
        """int32[n]: the greatest depth of node i and the nodes below it, made on first
        use: the tokens through node i end within `deepest_below[i] - depth(i)` bytes
        after it."""
        deepest = self.__dict__.get("_deepest_below")
        if deepest is None:
            deepest = np.zeros(self.num_nodes, dtype=np.int32)
            if self.num_nodes:
                _fill_deepest_below(self.node_depth, self.subtree_size, deepest, np.zeros_like(deepest))
            self.__dict__["_deepest_below"] = deepest
        return deepest

    @property
    def token_heads(self) -> tuple[np.ndarray, np.ndarray]:
        """(uint8[vocab_size, HEAD_BYTES], int8[vocab_size]): each token's first bytes and
        how many of them there are (0 for a token outside the trie), made on first use. A
        mask tells through them, without the grammar, where its tokens part ways."""
        heads = self.__dict__.get("_token_heads")
        if heads is None:
            spelled = np.zeros((self.vocab_size, HEAD_BYTES), dtype=np.uint8)
            lengths = np.zeros(self.vocab_size, dtype=np.int8)
            fill_token_heads_jit(
                self.node_byte, self.node_depth, self.tok_start, self.tok_end, self.node_tokens, spelled, lengths
            )
            heads = self.__dict__["_token_heads"] = (spelled, lengths)
        return heads

    # Construction -------------------------------------------------------------
    @classmethod
    def build(
        cls,
        token_bytes: list[bytes],
        excluded: frozenset[int] | set[int] = frozenset(),
        fingerprint: str | None = None,
        only: list[int] | None = None,
    ) -> "TokenTrie":
        """Builds the trie over `token_bytes[i]` for every id not in `excluded` and not empty
        (restricted to the ids in `only` when given)."""
        vocab_size = len(token_bytes)
        candidates = range(vocab_size) if only is None else only
        ids = [i for i in candidates if token_bytes[i] and i not in excluded]
        ids.sort(key=token_bytes.__getitem__)
        byte_chunks: list[bytes] = []
        depth_chunks: list[np.ndarray] = []
        end_node = np.empty(len(ids), dtype=np.int64)
        n_nodes = 1
        prev = b""
        for k, tid in enumerate(ids):
            cur = token_bytes[tid]
            lcp = _common_prefix_len(prev, cur)
            if lcp < len(cur):
                byte_chunks.append(cur[lcp:])
                depth_chunks.append(np.arange(lcp + 1, len(cur) + 1, dtype=np.int32))
                n_nodes += len(cur) - lcp
            end_node[k] = n_nodes - 1
            prev = cur
        node_byte = np.zeros(n_nodes, dtype=np.uint8)
        node_depth = np.zeros(n_nodes, dtype=np.int32)
        if byte_chunks:
            node_byte[1:] = np.frombuffer(b"".join(byte_chunks), dtype=np.uint8)
            node_depth[1:] = np.concatenate(depth_chunks)
        subtree_size = np.empty(n_nodes, dtype=np.int32)
        _fill_subtree_sizes(node_depth, subtree_size)
        # Tokens are sorted by bytes, so duplicates (same bytes, other id) are adjacent
        # and the per-node token lists are contiguous runs.
        node_tokens = np.asarray(ids, dtype=np.int32)
        tok_start = np.zeros(n_nodes, dtype=np.int32)
        tok_end = np.zeros(n_nodes, dtype=np.int32)
        if len(ids):
            first = np.ones(len(ids), dtype=bool)
            first[1:] = end_node[1:] != end_node[:-1]
            starts = np.flatnonzero(first)
            ends = np.append(starts[1:], len(ids))
            tok_start[end_node[starts]] = starts
            tok_end[end_node[starts]] = ends
        token_node = np.full(vocab_size, -1, dtype=np.int32)
        token_node[node_tokens] = end_node.astype(np.int32)
        if fingerprint is None:
            fingerprint = vocabulary_fingerprint(token_bytes, excluded) + ("" if only is None else f":subset{len(ids)}")
        return cls(
            node_byte, node_depth, subtree_size, tok_start, tok_end, node_tokens, token_node, vocab_size, fingerprint
        )

    @classmethod
    def for_tokenizer(cls, tokenizer, *, cache_dir: str | os.PathLike | None = None) -> "TokenTrie":
        """The trie of a `midword.engine.Tokenizer`, loaded from the on-disk cache when present."""
        token_bytes = tokenizer.all_token_bytes()
        excluded = frozenset(tokenizer.special_token_ids)
        fingerprint = vocabulary_fingerprint(token_bytes, excluded)
        path = _cache_path(cache_dir, fingerprint)
        if path is not None and path.exists():
            try:
                return cls.load(path, fingerprint)
            except (OSError, ValueError, KeyError):
                pass  # a stale or truncated cache file is rebuilt below
        trie = cls.build(token_bytes, excluded, fingerprint)
        if path is not None:
            try:
                trie.save(path)
            except OSError:
                pass  # a read-only cache only costs the next process a rebuild
        return trie

    _ARRAYS = ("node_byte", "node_depth", "subtree_size", "tok_start", "tok_end", "node_tokens", "token_node")

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        out = {prefix + name: getattr(self, name) for name in self._ARRAYS}
        out[prefix + "vocab_size"] = np.int64(self.vocab_size)
        return out

    @classmethod
    def from_arrays(cls, z, fingerprint: str, prefix: str = "") -> "TokenTrie":
        arrays = {name: z[prefix + name] for name in cls._ARRAYS}
        return cls(
            node_byte=arrays["node_byte"],
            node_depth=arrays["node_depth"],
            subtree_size=arrays["subtree_size"],
            tok_start=arrays["tok_start"],
            tok_end=arrays["tok_end"],
            node_tokens=arrays["node_tokens"],
            token_node=arrays["token_node"],
            vocab_size=int(z[prefix + "vocab_size"]),
            fingerprint=fingerprint,
        )

    def save(self, path: str | os.PathLike) -> None:
        save_arrays(path, self.arrays())

    @classmethod
    def load(cls, path: str | os.PathLike, fingerprint: str) -> "TokenTrie":
        with np.load(path) as z:
            if int(z["version"]) != TRIE_FORMAT_VERSION:
                raise ValueError("trie cache format changed")
            return cls.from_arrays(z, fingerprint)

    # Queries -------------------------------------------------------------------
    def tokens_at(self, node: int) -> list[int]:
        return self.node_tokens[self.tok_start[node] : self.tok_end[node]].tolist()

    def child(self, node: int, byte: int) -> int:
        """The child of `node` along `byte`, or -1."""
        if node == 0:
            return int(self.root_children()[byte])
        # Nodes near the root have hundreds of children: scanning them is compiled.
        return int(child_of_jit(self.node_byte, self.subtree_size, node, byte))

    def root_children(self) -> np.ndarray:
        # The root has up to 256 children: scanning them in Python on every query is slow.
        rc = self.__dict__.get("_root_child_table")
        if rc is None:
            rc = np.full(256, -1, dtype=np.int64)
            depth1 = np.flatnonzero(self.node_depth == 1)
            rc[self.node_byte[depth1]] = depth1
            self.__dict__["_root_child_table"] = rc
        return rc

    def node_for(self, data: bytes) -> int:
        """The node spelling `data`, or -1 when no token starts with `data`."""
        if not data:
            return 0
        return int(
            node_for_jit(self.node_byte, self.subtree_size, self.root_children(), np.frombuffer(data, dtype=np.uint8))
        )

    def extendable_suffixes(self, data: bytes, start: int = 0) -> list[tuple[int, int]]:
        """(index, node) for each index from `start` on where some token spells
        `data[index:]` and then more, in index order."""
        count = max(0, len(data) - start)
        out_idx = np.empty(count, dtype=np.int64)
        out_node = np.empty(count, dtype=np.int64)
        args = (
            self.node_byte,
            self.subtree_size,
            self.root_children(),
            np.frombuffer(data, dtype=np.uint8),
            start,
            out_idx,
            out_node,
        )
        # Past numba's dispatcher, which types a read-only array (the bytes) the slow way;
        # the trie's arrays and these never change type, so the entry is looked up once.
        entry = self.__dict__.get("_extendable_suffixes")
        if entry is None:
            entry = self.__dict__["_extendable_suffixes"] = compiled_for(extendable_suffixes_jit, args)
        n = entry(*args)
        return list(zip(out_idx[:n].tolist(), out_node[:n].tolist(), strict=True))

    def tokens_with_prefix(self, data: bytes) -> list[int]:
        """All tokens whose bytes start with `data` (`data` itself included if a token)."""
        node = self.node_for(data)
        if node < 0:
            return []
        lo = self.tok_start[node : node + self.subtree_size[node]]
        hi = self.tok_end[node : node + self.subtree_size[node]]
        return [int(t) for a, b in zip(lo.tolist(), hi.tolist(), strict=False) if b > a for t in self.node_tokens[a:b]]

    def tokens_prefix_of(self, data: bytes) -> list[tuple[int, int]]:
        """(length, token) for every token whose bytes are a non-empty prefix of `data`, shortest first."""
        out: list[tuple[int, int]] = []
        node = 0
        for i, b in enumerate(data):
            node = self.child(node, b)
            if node < 0:
                break
            out.extend((i + 1, t) for t in self.tokens_at(node))
        return out

    def has_extension(self, data: bytes) -> bool:
        """Whether some token is strictly longer than `data` and starts with it."""
        node = self.node_for(data)
        return node >= 0 and self.subtree_size[node] > 1

    def walk_table(self, table: np.ndarray, start: int, accepting: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """Mask of tokens whose bytes drive `table` (state x 256 -> state, -1 dead) from `start`
        without dying (and, given `accepting`, end in an accepting state); returns (mask, nodes visited)."""
        mask = np.zeros(mask_words(self.vocab_size), dtype=np.uint32)
        if accepting is None:
            accepting = np.ones(table.shape[0], dtype=np.bool_)
        visited = walk_table_jit(
            self.node_byte,
            self.node_depth,
            self.subtree_size,
            self.tok_start,
            self.tok_end,
            self.node_tokens,
            table,
            accepting,
            start,
            mask,
        )
        return mask, int(visited)


def save_arrays(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """Writes an .npz atomically, so a concurrent reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        payload: dict[str, Any] = {"version": np.int64(TRIE_FORMAT_VERSION), **arrays}
        np.savez(f, **payload)
    os.replace(tmp, path)


def _common_prefix_len(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def vocabulary_fingerprint(token_bytes: list[bytes], excluded) -> str:
    h = hashlib.sha256()
    h.update(f"v{TRIE_FORMAT_VERSION}:{len(token_bytes)}:".encode())
    for b in token_bytes:
        h.update(len(b).to_bytes(4, "little"))
        h.update(b)
    h.update(b"excluded:" + ",".join(map(str, sorted(excluded))).encode())
    return h.hexdigest()


def cache_dir() -> Path:
    """midword's on-disk cache: $MIDWORD_CACHE_DIR, else the user cache dir."""
    env = os.environ.get("MIDWORD_CACHE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("midword"))


def _cache_path(directory, fingerprint: str, kind: str = "tries") -> Path | None:
    if os.environ.get("MIDWORD_NO_DISK_CACHE"):
        return None
    base = Path(directory) if directory is not None else cache_dir()
    return base / kind / f"{fingerprint[:32]}.npz"


# Hot loops: njit functions and their plain-Python twins ------------------------------


def deepest_py(node_depth) -> int:
    """The largest depth (0 for no nodes). A loop rather than `.max()`, whose generic
    reduction numba would compile for these kernels alone: seconds of a fresh install."""
    deepest = 0
    for i in range(node_depth.shape[0]):
        deepest = max(deepest, int(node_depth[i]))
    return deepest


def fill_subtree_sizes_py(node_depth, subtree_size):
    n = node_depth.shape[0]
    # open_nodes holds the chain of ancestors still open; a node closes when a node of
    # equal or smaller depth arrives.
    open_nodes = np.empty(deepest_py(node_depth) + 2, dtype=np.int64)
    top = 0
    for i in range(n):
        d = node_depth[i]
        while top > 0 and node_depth[open_nodes[top - 1]] >= d:
            top -= 1
            j = open_nodes[top]
            subtree_size[j] = i - j
        open_nodes[top] = i
        top += 1
    while top > 0:
        top -= 1
        j = open_nodes[top]
        subtree_size[j] = n - j


def fill_deepest_below_py(node_depth, subtree_size, below, after):
    """TokenTrie.deepest_below, from the last node back, with `after[i]` the deepest of
    node i's subtree and its later siblings' (scratch): a node's first child's `after`
    is the deepest of all its children."""
    n = node_depth.shape[0]
    for i in range(n - 1, -1, -1):
        deepest = node_depth[i]
        if subtree_size[i] > 1 and after[i + 1] > deepest:
            deepest = after[i + 1]
        below[i] = deepest
        sibling = i + subtree_size[i]
        if sibling < n and node_depth[sibling] == node_depth[i] and after[sibling] > deepest:
            deepest = after[sibling]
        after[i] = deepest


deepest_jit = njit(deepest_py)
_fill_deepest_below = njit(fill_deepest_below_py)
_fill_subtree_sizes = njit_calling(fill_subtree_sizes_py, deepest_py=deepest_jit)


def child_of_py(node_byte, subtree_size, node, byte):
    """The child of `node` along `byte`, or -1: its children follow it, each after the
    subtree of the one before."""
    end = node + subtree_size[node]
    c = node + 1
    while c < end:
        if node_byte[c] == byte:
            return c
        c += subtree_size[c]
    return -1


child_of_jit = njit(child_of_py)


def node_for_py(node_byte, subtree_size, root_children, data):
    """The node spelling the bytes `data` (uint8), or -1 when no token starts with them."""
    node = root_children[data[0]]
    for i in range(1, data.shape[0]):
        if node < 0:
            return -1
        node = child_of_py(node_byte, subtree_size, node, data[i])
    return node


node_for_jit = njit_calling(node_for_py, child_of_py=child_of_jit)


def fill_token_heads_py(node_byte, node_depth, tok_start, tok_end, node_tokens, heads, lengths):
    """Writes each token's first bytes (up to heads.shape[1]) and their count. The nodes
    are in preorder, so on reaching a node `path` holds the bytes of its ancestors."""
    width = heads.shape[1]
    path = np.zeros(width, dtype=np.uint8)
    for node in range(1, node_byte.shape[0]):
        depth = node_depth[node]
        if depth <= width:
            path[depth - 1] = node_byte[node]
        kept = min(depth, width)
        for k in range(tok_start[node], tok_end[node]):
            token = node_tokens[k]
            for p in range(kept):
                heads[token, p] = path[p]
            lengths[token] = kept


fill_token_heads_jit = njit(fill_token_heads_py)


def extendable_suffixes_py(node_byte, subtree_size, root_children, data, start, out_idx, out_node):
    """For each index from `start` on, in order: where some token spells `data[idx:]`
    and goes on past it, the index and the node spelling it (into `out_idx`,
    `out_node`); returns how many."""
    n = 0
    for idx in range(start, data.shape[0]):
        node = node_for_py(node_byte, subtree_size, root_children, data[idx:])
        if node >= 0 and subtree_size[node] > 1:
            out_idx[n] = idx
            out_node[n] = node
            n += 1
    return n


extendable_suffixes_jit = njit_calling(extendable_suffixes_py, node_for_py=node_for_jit)


def walk_table_py(node_byte, node_depth, subtree_size, tok_start, tok_end, node_tokens, table, accepting, start, mask):
    """Sets the bit of every token whose bytes keep `table` alive from `start` and end in
    a state with `accepting[state]`; returns nodes visited."""
    n = node_byte.shape[0]
    states = np.empty(deepest_py(node_depth) + 1, dtype=np.int64)
    states[0] = start
    visited = 0
    i = 1
    while i < n:
        visited += 1
        state = table[states[node_depth[i] - 1], node_byte[i]]
        if state < 0:
            i += subtree_size[i]
            continue
        states[node_depth[i]] = state
        if accepting[state]:
            for k in range(tok_start[i], tok_end[i]):
                t = node_tokens[k]
                mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        i += 1
    return visited


walk_table_jit = njit_calling(walk_table_py, deepest_py=deepest_jit)


def always_alive_table() -> np.ndarray:
    """A one-state table that accepts every byte: a full walk, for benchmarks."""
    return np.zeros((1, 256), dtype=np.int32)


def benchmark(tokenizer, repeats: int = 5) -> dict:
    """Figures for `midword bench trie`: build/load time and walk speed."""
    token_bytes = tokenizer.all_token_bytes()
    excluded = frozenset(tokenizer.special_token_ids)
    t0 = time.perf_counter()
    trie = TokenTrie.build(token_bytes, excluded)
    build_s = time.perf_counter() - t0
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trie.npz"
        trie.save(path)
        t0 = time.perf_counter()
        TokenTrie.load(path, trie.fingerprint)
        load_s = time.perf_counter() - t0
    table = always_alive_table()
    trie.walk_table(table, 0)  # compile
    best = float("inf")
    visited = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, visited = trie.walk_table(table, 0)
        best = min(best, time.perf_counter() - t0)
    return {
        "tokenizer": tokenizer.name,
        "vocab_size": trie.vocab_size,
        "nodes": trie.num_nodes,
        "nodes_per_token": trie.num_nodes / max(1, len(trie.node_tokens)),
        "build_s": build_s,
        "load_s": load_s,
        "walk_ms": best * 1e3,
        "nodes_per_s": visited / best if best > 0 else float("inf"),
        "ns_per_node": best * 1e9 / max(1, visited),
    }
