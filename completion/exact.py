"""The exact character-prefix conditional: the yardstick CPC is measured against.

Given typed bytes L after a prompt, the exact distribution of what comes after L,
given that the output starts with L, sums over every token sequence that can spell L,
canonical or not, no beam. A *node* is a token sequence spelling L[:i]; the *first free
token* T is the token that carries the output past the end of L: T strictly extends
L[i:] (i < |L|), or, at a node spelling all of L, any non-special token. Each event
(node, T) is disjoint from the others and weighs P(node) · P(T | node) exactly; their
sum is P(output starts with L and goes on). Events are grouped by the text T adds past
L, the heaviest group wins, and its heaviest event (node + T) is where greedy decoding
continues (`exact_complete`).

Every node is scored, in one token-tree pass, when there are at most
`EXACT_FULL_NODES` of them (Gemma's byte-fallback pieces double every character, so a
7-letter tail already has hundreds). Larger trees are scored heaviest node first, in
rounds, until the weight of the nodes left unscored is below the gap between the two
best groups (then no unscored node can change the argmax: it is *certified*), or until
`EXACT_MAX_NODES`.

Too slow for the product path (CPC in cpc.py approximates it); `midword bench cpc`
runs it as its `exact` mode and scores its log-probabilities. Imports nothing heavy at
module level, so the bench's command line stays light.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

EXACT_FULL_NODES = 512  # cover trees up to this size are scored whole
EXACT_MAX_NODES = 1024  # larger ones are expanded best-first up to this many nodes
BEST_FIRST_ROUND = 64  # nodes scored per token-tree pass in best-first expansion
EXPANSION_TOLERANCE = 1e-3  # best-first stops when the unscored weight is below this share
DEFAULT_MAX_TOKENS = 24
DEFAULT_TIME_BUDGET_S = 60.0  # generous: a loaded machine must not cut completions short
_TREE_NODES_PER_CALL = 4096  # the transformers backend's default token-tree limit

# Cover trees: every token sequence that spells the typed bytes ------------------------------


class _Vocab:
    """Per-tokenizer tables: the trie, the ids that may be a first free token, and ids
    grouped by their bytes (byte-fallback pieces duplicate single characters)."""

    _cache: dict = {}

    def __init__(self, tokenizer):
        import numpy as np

        from midword.completion.constraint import Constraint

        self.tokenizer = tokenizer
        self.constraint = Constraint(tokenizer, None)
        self.trie = self.constraint.trie
        free = np.zeros(tokenizer.vocab_size, dtype=bool)
        free[np.asarray(self.trie.node_tokens, dtype=np.int64)] = True
        for t in tokenizer.eos_token_ids:
            free[t] = False
        self.free_ids = np.flatnonzero(free).astype(np.int64)
        self.group_bytes: list[bytes] = []
        self.group_of_bytes: dict[bytes, int] = {}
        group = np.empty(self.free_ids.size, dtype=np.int64)
        for k, t in enumerate(self.free_ids.tolist()):
            b = tokenizer.token_bytes(t)
            g = self.group_of_bytes.get(b)
            if g is None:
                g = len(self.group_bytes)
                self.group_of_bytes[b] = g
                self.group_bytes.append(b)
            group[k] = g
        self.free_group = group  # group of free_ids[k]

    @classmethod
    def of(cls, tokenizer) -> "_Vocab":
        v = cls._cache.get(tokenizer)
        if v is None:
            v = cls._cache[tokenizer] = cls(tokenizer)
        return v


@dataclass
class CoverEvent:
    """A first free token after a node: `tokens` = node + [T], spelling `end` bytes."""

    tokens: tuple[int, ...]
    end: int
    logw: float


@dataclass
class CoverTree:
    typed: bytes
    weighting: str  # "global": P(event); "local": the constrained decoder's renormalised steps
    nodes: int = 0  # token sequences scored
    total_nodes: int = 0  # token sequences that spell a prefix of the typed bytes
    best_first: bool = False  # nodes were scored heaviest first (not all at once)
    complete: bool = True  # every node was scored
    stop: str = "complete"  # why expansion ended: complete, certified, tolerance or cap
    log_frontier: float = -math.inf  # log weight of the nodes left unscored
    log_total: float = -math.inf  # log Σ weights of the events found
    consistent: list[CoverEvent] = field(default_factory=list)  # events that agree with the target
    best: CoverEvent | None = None  # heaviest event of the heaviest group
    best_text: bytes = b""  # what the winning group adds past the typed bytes
    log_best: float = -math.inf  # the winning group's weight
    log_second: float = -math.inf

    @property
    def certified(self) -> bool:
        """Whether the winning group is the true argmax: every node was scored, or the
        weight of the unscored nodes is below the gap between the two best groups."""
        if self.complete:
            return True
        if self.best is None:
            return False
        ratio = math.exp(min(0.0, self.log_second - self.log_best))
        if ratio >= 1.0:
            return False
        return self.log_best + math.log1p(-ratio) > self.log_frontier


def count_tree_nodes(trie, typed: bytes, bound: int) -> int:
    """How many token sequences spell a prefix of `typed` (the empty one included),
    counting no further than `bound` + 1."""
    n = len(typed)
    ways = [0] * (n + 1)
    ways[0] = 1
    for i in range(n):
        if ways[i]:
            for length, _ in trie.tokens_prefix_of(typed[i:]):
                ways[i + length] = min(bound + 1, ways[i + length] + ways[i])
    return min(bound + 1, sum(ways))


def expand_covers(
    model,
    prompt: list[int],
    typed: bytes,
    *,
    weighting: str = "global",
    target: bytes | None = None,
    want_best: bool = True,
    enumerate_all: bool = True,
    full_nodes: int = EXACT_FULL_NODES,
    max_nodes: int = EXACT_MAX_NODES,
    tolerance: float = EXPANSION_TOLERANCE,
) -> CoverTree:
    """Scores the token sequences that spell prefixes of `typed` and the first free
    tokens after them (see the module docstring).

    `weighting="global"` weighs a node by P(node | prompt); `"local"` by the product of
    the re-spelling decoder's renormalised step probabilities. Events whose text agrees
    with `target` (which starts with `typed`) are kept in `consistent`; `want_best`
    finds the heaviest group of events by the text they add past `typed`.

    With `enumerate_all`, a tree of at most `full_nodes` nodes is scored whole, in one
    pass. Otherwise nodes are scored heaviest first, in rounds, until — with `want_best`
    — the weight of the nodes not yet scored is below the gap between the two best
    groups (the argmax is certified), or — without — it is below `tolerance` times the
    weight found (of the agreeing events when there is a target, of all events
    otherwise); or until `max_nodes` nodes are scored."""
    import heapq

    import numpy as np

    if weighting not in ("global", "local"):
        raise ValueError(f"weighting must be 'global' or 'local', not {weighting!r}")
    if target is not None and not target.startswith(typed):
        raise ValueError(f"target {target[:40]!r} does not start with the typed bytes {typed!r}")
    tok = model.tokenizer
    vocab = _Vocab.of(tok)
    trie = vocab.trie
    n = len(typed)
    tree = CoverTree(typed=typed, weighting=weighting)

    # Per position i < n: children (tokens that are a prefix of typed[i:]) then the
    # extensions (tokens that run past the end of typed). One `allowed` array per position.
    kids: list[list[tuple[int, int]]] = []
    ext: list[np.ndarray] = []
    allowed: list[np.ndarray] = []
    for i in range(n):
        rest = typed[i:]
        k = trie.tokens_prefix_of(rest)
        e = np.asarray(
            [t for t in trie.tokens_with_prefix(rest) if len(tok.token_bytes(t)) > len(rest)], dtype=np.int64
        )
        kids.append(k)
        ext.append(e)
        allowed.append(np.concatenate([np.asarray([t for _, t in k], dtype=np.int64), e]))
    # Agreeing events: per position, indices into ext[i] (into free_ids at n).
    agree: list[np.ndarray] = []
    if target is not None:
        for i in range(n):
            tail = target[i:]
            ok = [
                j
                for j, t in enumerate(ext[i].tolist())
                if tail.startswith(tok.token_bytes(t)) or tok.token_bytes(t).startswith(tail)
            ]
            agree.append(np.asarray(ok, dtype=np.int64))
        tail = target[n:]
        if not tail:
            agree.append(np.arange(vocab.free_ids.size))
        else:
            ids = {t for _, t in trie.tokens_prefix_of(tail)} | set(trie.tokens_with_prefix(tail))
            agree.append(np.flatnonzero(np.isin(vocab.free_ids, np.asarray(sorted(ids), dtype=np.int64))))

    acc = _Accumulators(vocab, ext)
    consistent_mass = [-math.inf]

    def absorb(node: tuple[int, ...], pos: int, logw: float, lp: np.ndarray, push) -> None:
        idx = len(acc.scored)
        acc.scored.append(node)
        if pos < n:
            mass = float(np.logaddexp.reduce(lp.astype(np.float64))) if weighting == "local" else 0.0
            for j, (length, t) in enumerate(kids[pos]):
                push(node + (t,), pos + length, logw + float(lp[j]) - mass)
            w = lp[len(kids[pos]) :].astype(np.float64) + (logw - mass)
            acc.add_ext(pos, w, idx)
            picked = agree[pos].tolist() if target is not None else []
            ids = [int(ext[pos][j]) for j in picked]
            ends = [pos + len(tok.token_bytes(t)) for t in ids]
        else:
            w = lp[vocab.free_ids].astype(np.float64) + logw
            acc.add_free(w, idx, want_best)
            picked = agree[n].tolist() if target is not None else []
            ids = [int(vocab.free_ids[j]) for j in picked]
            ends = [n + len(tok.token_bytes(t)) for t in ids]
        for j, t, end in zip(picked, ids, ends, strict=False):
            tree.consistent.append(CoverEvent(node + (t,), end, float(w[j])))
            consistent_mass[0] = float(np.logaddexp(consistent_mass[0], w[j]))

    def score(nodes: list[tuple[tuple[int, ...], int]]):
        branches = [list(node) for node, _ in nodes]
        masks = [allowed[pos] if pos < n else None for _, pos in nodes]
        out = model.score_branches(prompt, branches, masks)
        tree.nodes += len(nodes)
        return [s.next_logprobs for s in out]

    node_limit = getattr(model, "max_branch_nodes", _TREE_NODES_PER_CALL)
    tree.total_nodes = count_tree_nodes(trie, typed, max(full_nodes, max_nodes))
    if enumerate_all and tree.total_nodes <= full_nodes:
        # Every node, parents before children; weights flow down from the parents' scores.
        order: list[tuple[tuple[int, ...], int]] = [((), 0)]
        k = 0
        while k < len(order):
            node, pos = order[k]
            k += 1
            if pos < n:
                order.extend((node + (t,), pos + length) for length, t in kids[pos])
        lps = []
        for lo in range(0, len(order), node_limit):
            lps.extend(score(order[lo : lo + node_limit]))
        weight: dict[tuple[int, ...], float] = {(): 0.0}

        def push_known(child, pos, logw):
            weight[child] = logw

        for (node, pos), lp in zip(order, lps, strict=False):
            absorb(node, pos, weight[node], lp, push_known)
    else:
        tree.best_first = True
        heap: list[tuple[float, int, tuple[int, ...], int]] = [(-0.0, 0, (), 0)]
        counter = [1]

        def push_heap(child, pos, logw):
            heapq.heappush(heap, (-logw, counter[0], child, pos))
            counter[0] += 1

        log_tol = math.log(tolerance)
        while heap and tree.nodes < max_nodes:
            if tree.nodes:
                frontier = float(np.logaddexp.reduce(np.asarray([-h[0] for h in heap], dtype=np.float64)))
                if want_best:
                    # decoding needs the argmax only: stop once no unscored node can change it
                    if frontier < acc.log_total():
                        acc.pick_best(tree, tok)
                        tree.complete, tree.log_frontier = False, frontier
                        if tree.certified:
                            tree.stop = "certified"
                            break
                elif frontier <= (consistent_mass[0] if target is not None else acc.log_total()) + log_tol:
                    tree.stop = "tolerance"
                    break
            batch: list[tuple[tuple[int, ...], int, float]] = []
            size = 0
            while heap and tree.nodes + len(batch) < max_nodes:
                cost = max(1, len(heap[0][2]))
                if batch and (size + cost > node_limit or len(batch) >= BEST_FIRST_ROUND):
                    break
                neg, _, node, pos = heapq.heappop(heap)
                batch.append((node, pos, -neg))
                size += cost
            lps = score([(node, pos) for node, pos, _ in batch])
            for (node, pos, logw), lp in zip(batch, lps, strict=False):
                absorb(node, pos, logw, lp, push_heap)
        tree.complete = not heap
        if tree.complete:
            tree.stop = "complete"
        elif tree.stop == "complete":
            tree.stop = "cap"
        tree.log_frontier = (
            -math.inf if not heap else float(np.logaddexp.reduce(np.asarray([-h[0] for h in heap], dtype=np.float64)))
        )
    tree.log_total = acc.log_total()
    if want_best:
        acc.pick_best(tree, tok)
    return tree


class _Accumulators:
    """Event weights summed over nodes: per extension token of each position, and per
    free token after the nodes that spell all the typed bytes; with the heaviest node
    behind each, for the argmax."""

    def __init__(self, vocab: _Vocab, ext):
        import numpy as np

        self.vocab = vocab
        self.ext = ext
        self.scored: list[tuple[int, ...]] = []
        self.acc_ext = [np.full(e.size, -np.inf) for e in ext]
        self.best_ext_w = [np.full(e.size, -np.inf) for e in ext]
        self.best_ext_node = [np.full(e.size, -1, dtype=np.int64) for e in ext]
        self.acc_free = np.full(vocab.free_ids.size, -np.inf)
        self.best_free_w = np.full(vocab.free_ids.size, -np.inf)
        self.best_free_node = np.full(vocab.free_ids.size, -1, dtype=np.int64)

    def add_ext(self, pos: int, w, idx: int) -> None:
        import numpy as np

        np.logaddexp(self.acc_ext[pos], w, out=self.acc_ext[pos])
        better = w > self.best_ext_w[pos]
        self.best_ext_w[pos][better] = w[better]
        self.best_ext_node[pos][better] = idx

    def add_free(self, w, idx: int, track_best: bool) -> None:
        import numpy as np

        np.logaddexp(self.acc_free, w, out=self.acc_free)
        if track_best:
            better = w > self.best_free_w
            self.best_free_w[better] = w[better]
            self.best_free_node[better] = idx

    def log_total(self) -> float:
        import numpy as np

        parts = [float(np.logaddexp.reduce(a)) for a in self.acc_ext if a.size]
        parts.append(float(np.logaddexp.reduce(self.acc_free)))
        return float(np.logaddexp.reduce(np.asarray(parts)))

    def pick_best(self, tree: CoverTree, tok) -> None:
        """Groups the events by the text they add past the typed bytes; the heaviest
        group wins, and its heaviest event is where decoding continues."""
        import numpy as np

        vocab = self.vocab
        n = len(tree.typed)
        extra_groups: dict[bytes, int] = {}
        ext_group = []
        base = len(vocab.group_bytes)
        for i, e in enumerate(self.ext):
            g = np.empty(e.size, dtype=np.int64)
            for j, t in enumerate(e.tolist()):
                past = tok.token_bytes(t)[n - i :]
                k = vocab.group_of_bytes.get(past)
                if k is None:
                    k = extra_groups.setdefault(past, base + len(extra_groups))
                g[j] = k
            ext_group.append(g)
        total = np.full(base + len(extra_groups), -np.inf)
        np.logaddexp.at(total, vocab.free_group, self.acc_free)
        for g, a in zip(ext_group, self.acc_ext, strict=False):
            if a.size:
                np.logaddexp.at(total, g, a)
        if total.size == 0 or not np.isfinite(total).any():
            return
        top = int(np.argmax(total))
        tree.log_best = float(total[top])
        tree.log_second = float(np.partition(total, -2)[-2]) if total.size > 1 else -math.inf
        tree.best_text = vocab.group_bytes[top] if top < base else next(b for b, k in extra_groups.items() if k == top)
        best_w, best = -np.inf, None
        for k in np.flatnonzero(vocab.free_group == top).tolist():
            if self.best_free_node[k] >= 0 and self.best_free_w[k] > best_w:
                best_w = self.best_free_w[k]
                best = CoverEvent(
                    self.scored[self.best_free_node[k]] + (int(vocab.free_ids[k]),),
                    n + len(tree.best_text),
                    float(best_w),
                )
        for i, g in enumerate(ext_group):
            for j in np.flatnonzero(g == top).tolist():
                if self.best_ext_node[i][j] >= 0 and self.best_ext_w[i][j] > best_w:
                    best_w = self.best_ext_w[i][j]
                    t = int(self.ext[i][j])
                    best = CoverEvent(
                        self.scored[self.best_ext_node[i][j]] + (t,), i + len(tok.token_bytes(t)), float(best_w)
                    )
        tree.best = best


# Completions -------------------------------------------------------------------------------


def make_prompt(tokenizer, stable: list[int]) -> list[int]:
    """BOS + the stable tokens, cut at the start exactly as `CompletionEngine` cuts it."""
    from midword.completion.engine import MAX_PROMPT_TOKENS, PROMPT_CUT_STEP

    if len(stable) > MAX_PROMPT_TOKENS:
        drop = len(stable) - MAX_PROMPT_TOKENS
        drop = -(-drop // PROMPT_CUT_STEP) * PROMPT_CUT_STEP
        stable = stable[drop:]
    bos = tokenizer.bos_token_id
    return ([bos] if bos is not None else []) + list(stable)


def _utf8_text(data: bytes) -> str:
    """`data` as text, without an incomplete character at its end."""
    for cut in range(4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace")


@dataclass
class ExactCompletion:
    inserted: str
    prompt: list[int]
    typed: bytes
    tree: CoverTree | None


def exact_complete(
    model,
    prefix: str,
    suffix: str = "",
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
    target: bytes | None = None,
    full_nodes: int = EXACT_FULL_NODES,
    max_nodes: int = EXACT_MAX_NODES,
) -> ExactCompletion:
    """The `exact` mode: the heaviest first free token over every spelling of the typed
    bytes, then the same greedy loop as the engine (single line, no grammar).
    `target` (typed bytes + truth) only records the agreeing events for `logprob`."""
    from midword.completion.cpc import backoff
    from midword.completion.decode import StopRules, generate

    started = time.perf_counter()
    tok = model.tokenizer
    vocab = _Vocab.of(tok)
    constraint = vocab.constraint
    back = backoff(tok, prefix.encode("utf-8"), "exact")
    prompt = make_prompt(tok, back.stable)
    state = constraint.initial(back.typed)
    initial: list[int] = []
    tree = None
    if back.typed:
        full_target = back.typed + target if target is not None else None
        tree = expand_covers(
            model,
            prompt,
            back.typed,
            weighting="global",
            target=full_target,
            want_best=True,
            full_nodes=full_nodes,
            max_nodes=max_nodes,
        )
        if tree.best is not None:
            initial = list(tree.best.tokens)
            for t in initial:
                state = constraint.advance(state, t)
    rules = StopRules(
        max_tokens=max_tokens,
        single_line=True,
        suffix_line=suffix.split("\n", 1)[0].strip(),
        time_budget_s=time_budget_s,
    )
    gen = generate(
        model, constraint, prompt, state, rules, initial_tokens=initial, typed_len=len(back.typed), started=started
    )
    return ExactCompletion(_utf8_text(gen.inserted), prompt, back.typed, tree)
