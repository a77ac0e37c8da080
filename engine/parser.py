"""The Earley parser over lexemes, with rows hash-consed into a tree.

Rules are flattened into arrays of dot positions: position `p` is "rule r with the dot
before its k-th symbol", `dot_symbol[p]` is that symbol (or END), and advancing an item
is `p + 1`. An Earley item is `(p, origin)`, where `origin` is the id of the row the
rule started in.

A row is the item set after scanning one more lexeme. Rows are identified by where
they came from: scanning lexeme set L from row r always gives the same row, so the
recognizer keeps `(r, L) -> child` in its step table (this generalises the seed's
row-reuse trick: when the trie walk backs up and scans the same lexeme again, the row
is already there). A parse state is therefore just a row id; rolling back is going
back to an ancestor id.

Rows are built by a compiled function (`build_row_py` is its plain-Python twin) into
flat pools: a row keeps only what later rows need of it, its items with a symbol after
the dot, already advanced past it and sorted by that symbol, so completing a
nonterminal or scanning a lexeme in a later row is a binary search and a copy. No
Python object exists per row or item.

Nullable nonterminals use the Aycock–Horspool rule (predicting a nullable symbol also
advances over it), so completion never needs to look at the row being built. Items
predicted in a row depend only on which nonterminals are predicted, so each
nonterminal's prediction closure is computed once per grammar, on the first row that
needs it (compiled, `predict_closure_py`: by the mask walk itself or by `_make_row`),
and added wholesale. Non-productive rules are dropped up front so every allowed lexeme
can be completed.

Unique-member objects (JSON objects whose keys come in any order, each once, some
required) are a side condition on rows rather than grammar states (`KeySets`): each
row knows the keys its innermost open object has written, from its parent's, and
leaves out the items that would scan a written key or close the object early.
"""

from __future__ import annotations

import numpy as np

from ._arrays import filled, grown
from ._jit import compiled_once, njit, njit_calling
from .analysis import END, flatten_rules, productive_rules, rule_tables_jit, rule_tables_py
from .grammar import Grammar
from .limits import DEFAULT_LIMITS, LimitExceeded, Limits

# Row building statuses (what `build_row` returns with its value).
ROW_BUILT = 0  # value: entries appended to the row pool
NEED_PREDICTION = 1  # n: how many nonterminals lack a prediction closure, listed in allowed_out[:n]
TOO_MANY_ITEMS = 2  # value: items in the row so far
NOTHING_SCANS = 3  # the parent row expects none of the scanned lexemes
NEED_SCRATCH = 4  # the scratch arrays are too small for this row: grow them and build again
NEED_POOL = 5  # the row pool has no room for this row: grow it and build again

# Lexeme roles of unique-member objects (KeySets.role): a key id is >= 0; a close that
# needs every key of key set j written is ROLE_SET - 2j, a separator that needs some key
# of set j unwritten ROLE_SET - 2j - 1.
ROLE_NONE = -1
ROLE_OPEN = -2
ROLE_CLOSE = -3
ROLE_SET = -4

# EarleyParser.counts
ROWS, POOL_USED, EPOCH, STEPS_USED, PRED_USED, PREDNT_USED = range(6)


def push_advanced(row, sym, row_start, row_end, adv_sym, adv_pos, adv_origin, work_pos, work_origin, n_work):
    """Pushes the entries of `row` with symbol `sym` (its items with `sym` after the dot,
    advanced past it) onto the work stack; returns the new stack size, -1 when full."""
    lo = row_start[row]
    hi = row_end[row]
    # Entries are sorted by symbol: binary search for the first with `sym`.
    end = hi
    while lo < end:
        mid = (lo + end) >> 1
        if adv_sym[mid] < sym:
            lo = mid + 1
        else:
            end = mid
    while lo < hi and adv_sym[lo] == sym:
        if n_work >= work_pos.shape[0]:
            return -1
        work_pos[n_work] = adv_pos[lo]
        work_origin[n_work] = adv_origin[lo]
        n_work += 1
        lo += 1
    return n_work


def build_row_py(
    row_id,
    epoch,
    parent,
    lexemes,
    kpos,
    korigin,
    nk,
    dot_symbol,
    dot_lhs,
    nullable,
    accept_pos,
    pred_start,
    pred_end,
    pred_pool,
    prednt_start,
    prednt_end,
    prednt_pool,
    row_start,
    row_end,
    row_accepting,
    adv_sym,
    adv_pos,
    adv_origin,
    pool_used,
    hkeys,
    hstamp,
    pstamp,
    ntstamp,
    work_pos,
    work_origin,
    item_pos,
    item_origin,
    pred_list,
    allowed_out,
    max_items,
    ks_role,
    ks_req_ptr,
    ks_req_keys,
    ks_ctx,
    key_stamp,
):
    """Builds Earley row `row_id` at `adv_*[pool_used:]`; returns (status, value, n):
    when built, the row's expected lexemes are `allowed_out[:n]`, ascending.

    The kernel is what scanning `lexemes` in row `parent` advances (or `kpos/korigin[:nk]`
    for the root, `parent` < 0). The row is stored as its items with a symbol after the
    dot, already moved past it, sorted by that symbol: exactly what a later completion
    of the symbol or a scan of it (a lexeme, negative) adds. Nothing outside the row's
    own slots and the scratch arrays is written until the row is complete, so a build
    stopped for missing prediction closures (the pass names them all, in
    `allowed_out[:n]`) is simply run again once they are made.

    `epoch` (unique per call) marks the scratch sets: a slot belongs to this build iff
    its stamp equals `epoch`, so nothing is cleared between builds.

    `ks_*` and `key_stamp` are the unique-member objects' side condition (`KeySets`;
    empty `ks_role` where the grammar has none): the row's object context is set in
    `ks_ctx` from the parent's and the scanned lexemes' roles, and the row drops its
    items before a key the innermost open object has written or before a close whose
    required keys it lacks, so those lexemes are not expected."""
    n_work = 0
    if parent >= 0:
        for k in range(lexemes.shape[0]):
            n_work = push_advanced(
                parent, -lexemes[k] - 1, row_start, row_end, adv_sym, adv_pos, adv_origin, work_pos, work_origin, n_work
            )
            if n_work < 0:
                return NEED_SCRATCH, 0, 0
        if n_work == 0:
            return NOTHING_SCANS, 0, 0
    else:
        for k in range(nk):
            work_pos[n_work] = kpos[k]
            work_origin[n_work] = korigin[k]
            n_work += 1
    hmask = hkeys.shape[0] - 1
    end_sym = END
    n_items = 0
    n_pred = 0
    # Nonterminals met without a prediction closure: the pass goes on to find them all,
    # so that one round of closures serves the row (a row that first meets a thousand
    # nonterminals would otherwise be built a thousand times).
    n_missing = 0
    while n_work > 0:
        n_work -= 1
        pos = work_pos[n_work]
        origin = work_origin[n_work]
        key = (pos << 32) | origin
        slot = (pos * 40503 + origin * 9973) & hmask
        seen = False
        while hstamp[slot] == epoch:
            if hkeys[slot] == key:
                seen = True
                break
            slot = (slot + 1) & hmask
        if seen:
            continue
        hstamp[slot] = epoch
        hkeys[slot] = key
        if n_items + n_pred >= max_items:
            return TOO_MANY_ITEMS, n_items + n_pred, 0
        if n_items >= item_pos.shape[0] or 2 * n_items >= hkeys.shape[0]:
            return NEED_SCRATCH, 0, 0
        item_pos[n_items] = pos
        item_origin[n_items] = origin
        n_items += 1
        sym = dot_symbol[pos]
        if sym == end_sym:
            if origin == row_id:
                continue  # an empty derivation: Aycock-Horspool advanced over it at prediction
            n_work = push_advanced(
                origin, dot_lhs[pos], row_start, row_end, adv_sym, adv_pos, adv_origin, work_pos, work_origin, n_work
            )
            if n_work < 0:
                return NEED_SCRATCH, 0, 0
        elif sym >= 0:
            if ntstamp[sym] != epoch:
                s = pred_start[sym]
                if s < 0:
                    ntstamp[sym] = epoch
                    if n_missing < allowed_out.shape[0]:
                        allowed_out[n_missing] = sym
                        n_missing += 1
                else:
                    for q in range(prednt_start[sym], prednt_end[sym]):
                        ntstamp[prednt_pool[q]] = epoch
                    if n_pred + pred_end[sym] - s > pred_list.shape[0]:
                        return NEED_SCRATCH, 0, 0
                    for q in range(s, pred_end[sym]):
                        p = pred_pool[q]
                        if pstamp[p] != epoch:
                            pstamp[p] = epoch
                            pred_list[n_pred] = p
                            n_pred += 1
                    if n_items + n_pred > max_items:
                        return TOO_MANY_ITEMS, n_items + n_pred, 0
            if nullable[sym]:
                if n_work >= work_pos.shape[0]:
                    return NEED_SCRATCH, 0, 0
                work_pos[n_work] = pos + 1
                work_origin[n_work] = origin
                n_work += 1
    if n_missing > 0:
        return NEED_PREDICTION, allowed_out[0], n_missing
    # The object context (KeySets): the parent's, changed by the first brace or key of
    # the scanned set (a scanned set is one text: at most one brace or key).
    has_roles = ks_role.shape[0] > 0
    ctx = -1
    if has_roles:
        if parent >= 0:
            ctx = ks_ctx[4 * parent]
            for k in range(lexemes.shape[0]):
                role = ks_role[lexemes[k]]
                if role == ROLE_NONE or (role <= ROLE_SET and (ROLE_SET - role) & 1 == 1):
                    continue  # no role, or a separator
                if role == ROLE_OPEN:
                    ks_ctx[4 * row_id + 1] = ctx
                    ks_ctx[4 * row_id + 2] = -1
                    ks_ctx[4 * row_id + 3] = -1
                    ctx = row_id
                elif role >= 0:
                    if ctx >= 0:
                        ks_ctx[4 * row_id + 1] = ks_ctx[4 * ctx + 1]
                        ks_ctx[4 * row_id + 2] = ctx
                        ks_ctx[4 * row_id + 3] = role
                        ctx = row_id
                elif ctx >= 0:  # a close, plain or with required keys
                    ctx = ks_ctx[4 * ctx + 1]
                break
        ks_ctx[4 * row_id] = ctx
    stamped = False
    # Store the row: items with a symbol after the dot, advanced, sorted by symbol.
    base = pool_used
    if base + n_items + n_pred > adv_sym.shape[0]:
        return NEED_POOL, n_items + n_pred, 0
    if n_items + n_pred > allowed_out.shape[0]:
        return NEED_SCRATCH, 0, 0
    m = 0
    accepting = False
    for k in range(n_items + n_pred):
        if k < n_items:
            pos = item_pos[k]
            origin = item_origin[k]
        else:
            pos = pred_list[k - n_items]
            origin = row_id
        sym = dot_symbol[pos]
        if sym == end_sym:
            if pos == accept_pos and origin == 0:
                accepting = True
            continue
        if has_roles and sym < 0:
            role = ks_role[-sym - 1]
            if role >= 0 or role <= ROLE_SET:
                if not stamped:
                    # The keys the innermost open object has written, stamped once.
                    c = ctx
                    while c >= 0 and ks_ctx[4 * c + 3] >= 0:
                        key_stamp[ks_ctx[4 * c + 3]] = epoch
                        c = ks_ctx[4 * c + 2]
                    stamped = True
                if role >= 0:
                    if key_stamp[role] == epoch:
                        continue  # a key written already
                else:
                    j = (ROLE_SET - role) >> 1
                    complete = ctx >= 0
                    for q in range(ks_req_ptr[j], ks_req_ptr[j + 1]):
                        if key_stamp[ks_req_keys[q]] != epoch:
                            complete = False
                            break
                    if (ROLE_SET - role) & 1 == 0:
                        if not complete:
                            continue  # a close before a required key
                    elif complete:
                        continue  # a separator with no key left to follow it
        adv_sym[base + m] = sym
        adv_pos[base + m] = pos + 1
        adv_origin[base + m] = origin
        m += 1
    # A stable sort by symbol, written out: numba's own argsort took seconds to compile.
    if m <= 32:
        for i in range(base + 1, base + m):
            k_sym = adv_sym[i]
            k_pos = adv_pos[i]
            k_origin = adv_origin[i]
            j = i - 1
            while j >= base and adv_sym[j] > k_sym:
                adv_sym[j + 1] = adv_sym[j]
                adv_pos[j + 1] = adv_pos[j]
                adv_origin[j + 1] = adv_origin[j]
                j -= 1
            adv_sym[j + 1] = k_sym
            adv_pos[j + 1] = k_pos
            adv_origin[j + 1] = k_origin
    else:
        # Bottom-up merge sort, runs of `width` merged from src into dst and back.
        src_sym = adv_sym[base : base + m].copy()
        src_pos = adv_pos[base : base + m].copy()
        src_origin = adv_origin[base : base + m].copy()
        dst_sym = np.empty_like(src_sym)
        dst_pos = np.empty_like(src_pos)
        dst_origin = np.empty_like(src_origin)
        width = 1
        while width < m:
            lo = 0
            while lo < m:
                mid = min(lo + width, m)
                hi = min(lo + 2 * width, m)
                a = lo
                b = mid
                for out in range(lo, hi):
                    # Ties take the left run first: the sort stays stable.
                    if b >= hi or (a < mid and src_sym[a] <= src_sym[b]):
                        take = a
                        a += 1
                    else:
                        take = b
                        b += 1
                    dst_sym[out] = src_sym[take]
                    dst_pos[out] = src_pos[take]
                    dst_origin[out] = src_origin[take]
                lo = hi
            src_sym, dst_sym = dst_sym, src_sym
            src_pos, dst_pos = dst_pos, src_pos
            src_origin, dst_origin = dst_origin, src_origin
            width *= 2
        # Element by element: numba's slice assignment from an array brings in its
        # shape-mismatch error, whose message formatting (str, join, f-strings) took most
        # of this kernel's compile time after a fresh install.
        for i in range(m):
            adv_sym[base + i] = src_sym[i]
            adv_pos[base + i] = src_pos[i]
            adv_origin[base + i] = src_origin[i]
    row_start[row_id] = base
    row_end[row_id] = base + m
    row_accepting[row_id] = accepting
    # Lexemes are the negative symbols, first and in descending lexeme order.
    n_allowed = 0
    last = 0
    for k in range(m - 1, -1, -1):
        sym = adv_sym[base + k]
        if sym < 0 and sym != last:
            allowed_out[n_allowed] = -sym - 1
            n_allowed += 1
            last = sym
    return ROW_BUILT, m, n_allowed


build_row_jit = njit_calling(build_row_py, push_advanced=njit(push_advanced))


def predict_closure_py(
    nt,
    epoch,
    rule_ptr,
    rule_first,
    dot_symbol,
    nullable,
    pstamp,
    ntstamp,
    stack,
    todo,
    counts,
    pred_start,
    pred_end,
    pred_pool,
    prednt_start,
    prednt_end,
    prednt_pool,
):
    """Stores the prediction closure of nonterminal `nt` (what `build_row` asks for with
    NEED_PREDICTION): the dot positions that predicting `nt` adds to a row, its rules'
    first positions transitively and past nullable symbols, appended to `pred_pool`,
    and the nonterminals so predicted, appended to `prednt_pool`. False, with nothing
    written, when a pool may be too small (the caller grows it). `epoch` must be new:
    it marks the scratch stamps, as in build_row. A depth-first search whose order
    (each nonterminal's rules taken from the last) fixes the order of the pools."""
    pred_used = counts[PRED_USED]
    prednt_used = counts[PREDNT_USED]
    if pred_used + pstamp.shape[0] > pred_pool.shape[0] or prednt_used + ntstamp.shape[0] > prednt_pool.shape[0]:
        return False
    first_pos = pred_used
    first_nt = prednt_used
    ntstamp[nt] = epoch
    prednt_pool[prednt_used] = nt
    prednt_used += 1
    todo[0] = nt
    n_todo = 1
    while n_todo > 0:
        n_todo -= 1
        x = todo[n_todo]
        n_stack = 0
        for k in range(rule_ptr[x], rule_ptr[x + 1]):
            stack[n_stack] = rule_first[k]
            n_stack += 1
        while n_stack > 0:
            n_stack -= 1
            p = stack[n_stack]
            if pstamp[p] == epoch:
                continue
            pstamp[p] = epoch
            pred_pool[pred_used] = p
            pred_used += 1
            sym = dot_symbol[p]
            if sym != END and sym >= 0:
                if ntstamp[sym] != epoch:
                    ntstamp[sym] = epoch
                    prednt_pool[prednt_used] = sym
                    prednt_used += 1
                    todo[n_todo] = sym
                    n_todo += 1
                if nullable[sym]:
                    stack[n_stack] = p + 1
                    n_stack += 1
    pred_start[nt] = first_pos
    pred_end[nt] = pred_used
    prednt_start[nt] = first_nt
    prednt_end[nt] = prednt_used
    counts[PRED_USED] = pred_used
    counts[PREDNT_USED] = prednt_used
    return True


predict_closure_jit = njit(predict_closure_py)


class KeySets:
    """The unique-member objects' side condition, as the parser's arrays.

    A grammar whose lexemes carry roles (`Lexeme.role`, made by
    `GrammarBuilder.object_open/object_close/member_key`) has objects whose members
    come in any order, each key at most once, some keys required: the grammar itself
    is linear (`{ member (, member)* }`), and the rest is this condition. Every row
    has an object context: a persistent stack of the open objects, each with the keys
    it has written, as nodes stored at the row that made them (`ks_ctx`, four slots a
    row). Scanning an open brace pushes, a close pops, a key adds its id to the
    innermost object. A row does not expect a key lexeme whose key that object has,
    nor a close lexeme whose required keys it lacks, nor a separator of an object with
    no unlisted keys once every listed key is written (build_row_py). JSON's brackets
    nest the same whichever parse is followed, so one context per row is exact."""

    def __init__(self, role: np.ndarray, req_ptr: np.ndarray, req_keys: np.ndarray, n_keys: int):
        self.role = role
        self.req_ptr = req_ptr
        self.req_keys = req_keys
        self.n_keys = n_keys

    @staticmethod
    def of(grammar: Grammar) -> "KeySets":
        roles = [lx.role for lx in grammar.lexemes]
        empty = np.zeros(0, dtype=np.int64)
        # Braces alone need no context: only keys and required sets make one useful.
        if not any(r is not None and (r[0] in ("key", "more") or (r[0] == "close" and r[1])) for r in roles):
            return KeySets(empty, np.zeros(1, dtype=np.int64), empty, 0)
        key_ids: dict[str, int] = {}
        sets: dict[tuple[str, ...], int] = {}
        role = np.full(len(roles), ROLE_NONE, dtype=np.int64)
        for i, r in enumerate(roles):
            if r is None:
                continue
            if r[0] == "open":
                role[i] = ROLE_OPEN
            elif r[0] == "key":
                role[i] = key_ids.setdefault(r[1], len(key_ids))
            elif r[0] == "close" and not r[1]:
                role[i] = ROLE_CLOSE
            elif r[0] == "close":
                role[i] = ROLE_SET - 2 * sets.setdefault(tuple(r[1]), len(sets))
            elif r[0] == "more":
                role[i] = ROLE_SET - 2 * sets.setdefault(tuple(r[1]), len(sets)) - 1
            else:
                raise ValueError(f"unknown lexeme role {r!r}")
        req_ptr = [0]
        req_keys: list[int] = []
        for required in sets:  # in id order (dicts keep insertion order)
            # A key no lexeme writes still gets an id: it is never written.
            req_keys += [key_ids.setdefault(k, len(key_ids)) for k in required]
            req_ptr.append(len(req_keys))
        return KeySets(role, np.array(req_ptr, dtype=np.int64), np.array(req_keys, dtype=np.int64), len(key_ids))


def _with_rule(flat: tuple, lhs: int, rhs_symbol: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`flatten_rules`' arrays with the rule `lhs -> rhs_symbol` after the others."""
    rule_lhs, rhs_len, rhs_flat = flat
    n, m = rule_lhs.shape[0], rhs_flat.shape[0]
    out_lhs = np.empty(n + 1, dtype=np.int64)
    out_lhs[:n] = rule_lhs
    out_lhs[n] = lhs
    out_len = np.empty(n + 1, dtype=np.int64)
    out_len[:n] = rhs_len
    out_len[n] = 1
    out_flat = np.empty(m + 1, dtype=np.int64)
    out_flat[:m] = rhs_flat
    out_flat[m] = rhs_symbol
    return out_lhs, out_len, out_flat


class EarleyParser:
    def __init__(self, grammar: Grammar, limits: Limits = DEFAULT_LIMITS, use_jit: bool = True):
        self.grammar = grammar
        self.limits = limits
        self._build_fn = build_row_jit if use_jit else build_row_py
        self._build = None
        self._closure_fn = predict_closure_jit if use_jit else predict_closure_py
        self._closure = None
        n_nt = len(grammar.nonterminals)
        if grammar.all_productive:
            rules = grammar.rules
        else:
            if grammar.size() > limits.max_grammar_size:
                raise LimitExceeded("max_grammar_size", limits.max_grammar_size, f"grammar has size {grammar.size()}")
            rules = productive_rules(grammar, use_jit)
        # Augmented start: the accepting item is (start' -> start ., origin root).
        self.augmented = n_nt
        if grammar.all_productive and grammar.flat_rules is not None:
            lhs, rhs_len, rhs_flat = _with_rule(grammar.flat_rules, self.augmented, grammar.start)
        else:
            lhs, rhs_len, rhs_flat = flatten_rules(rules, [(self.augmented, (grammar.start,))])
        n_rules, n_symbols = lhs.shape[0], rhs_flat.shape[0]
        # grammar.size(): a symbol per rule and one per right-side symbol, the augmented
        # rule's two aside (checked before the productivity analysis where there is one).
        if n_rules + n_symbols - 2 > limits.max_grammar_size:
            raise LimitExceeded(
                "max_grammar_size", limits.max_grammar_size, f"grammar has size {n_rules + n_symbols - 2}"
            )
        self.dot_symbol = np.empty(n_rules + n_symbols, dtype=np.int64)
        self.dot_lhs = np.empty(n_rules + n_symbols, dtype=np.int64)
        first_pos = np.empty(n_rules, dtype=np.int64)
        self.nullable = np.empty(n_nt + 1, dtype=np.bool_)
        # Each nonterminal's rules, as first positions, in grammar order:
        # rule_first[rule_ptr[nt]:rule_ptr[nt + 1]].
        self.rule_first = np.empty(n_rules, dtype=np.int64)
        self.rule_ptr = np.empty(n_nt + 2, dtype=np.int64)
        args = (
            lhs,
            rhs_len,
            rhs_flat,
            self.dot_symbol,
            self.dot_lhs,
            first_pos,
            self.nullable,
            self.rule_first,
            self.rule_ptr,
        )
        compiled_once(rule_tables_jit if use_jit else rule_tables_py, args)(*args)
        dot_symbol = self.dot_symbol
        self.accept_pos = int(first_pos[-1]) + 1
        # Prediction closures, computed on demand, as ranges of flat pools (-1: not yet).
        self.pred_start = filled(n_nt + 1, -1, dtype=np.int64)
        self.pred_end = filled(n_nt + 1, -1, dtype=np.int64)
        self.prednt_start = filled(n_nt + 1, -1, dtype=np.int64)
        self.prednt_end = filled(n_nt + 1, -1, dtype=np.int64)
        self.pred_pool = np.zeros(256, dtype=np.int64)
        self.prednt_pool = np.zeros(256, dtype=np.int64)
        # The closure's depth-first stacks (bounds in predict_closure_py).
        self._closure_stack = np.zeros(2 * len(dot_symbol) + 2, dtype=np.int64)
        self._closure_todo = np.zeros(n_nt + 2, dtype=np.int64)
        # Rows live in flat pools (see build_row_py): no Python object per row or item,
        # so the garbage collector has nothing to scan however many rows there are.
        # Counters shared with compiled callers that build rows themselves (the mask
        # walk): rows, pool entries used, build epoch, rows built against the fuel, and
        # the prediction pools' entries used.
        self.counts = np.zeros(6, dtype=np.int64)
        self._walk_arrays: tuple | None = None
        self.row_start = np.zeros(64, dtype=np.int64)
        self.row_end = np.zeros(64, dtype=np.int64)
        self.row_accepting = np.zeros(64, dtype=np.bool_)
        keysets = KeySets.of(grammar)
        self.ks_role = keysets.role
        self.ks_req_ptr = keysets.req_ptr
        self.ks_req_keys = keysets.req_keys
        self.key_stamp = filled(keysets.n_keys, -1, dtype=np.int64)
        # Per row: its object context, then (as a context node) the context outside its
        # object, the node before it in its object and the key it added (KeySets).
        self.ks_ctx = np.zeros(4 * 64, dtype=np.int64)
        self.adv_sym = np.zeros(1024, dtype=np.int32)
        self.adv_pos = np.zeros(1024, dtype=np.int32)
        self.adv_origin = np.zeros(1024, dtype=np.int32)
        # Scratch for one row build, grown (doubling) when a row needs more.
        self._pstamp = filled(len(dot_symbol), -1, dtype=np.int64)
        self._ntstamp = filled(n_nt + 1, -1, dtype=np.int64)
        self._size_scratch(256)
        self.last_allowed: tuple[int, np.ndarray] = (-1, np.zeros(0, dtype=np.int64))
        self._lexeme_arrays: dict[int, np.ndarray] = {}
        self._allowed: dict[int, frozenset[int]] = {}
        self._no_lexemes = np.zeros(0, dtype=np.int64)
        kernel = first_pos[-1:]
        self.root = self._make_row(-1, self._no_lexemes, kernel, np.zeros(1, dtype=np.int64))

    def walk_arrays(self, max_items: int, fuel: int) -> tuple:
        """Everything a compiled caller needs to build rows itself (mask.scan_in_walk),
        in one tuple that stays valid until an array is replaced."""
        arrays = self._walk_arrays
        if arrays is None:
            arrays = self._walk_arrays = (
                self.counts,
                self.dot_symbol,
                self.dot_lhs,
                self.nullable,
                self.accept_pos,
                self.pred_start,
                self.pred_end,
                self.pred_pool,
                self.prednt_start,
                self.prednt_end,
                self.prednt_pool,
                self.row_start,
                self.row_end,
                self.row_accepting,
                self.adv_sym,
                self.adv_pos,
                self.adv_origin,
                self._hkeys,
                self._hstamp,
                self._pstamp,
                self._ntstamp,
                self._work_pos,
                self._work_origin,
                self._item_pos,
                self._item_origin,
                self._pred_list,
                self._allowed_out,
                max_items,
                fuel,
                self._no_lexemes,
                self.rule_ptr,
                self.rule_first,
                self._closure_stack,
                self._closure_todo,
                self.ks_role,
                self.ks_req_ptr,
                self.ks_req_keys,
                self.ks_ctx,
                self.key_stamp,
            )
        return arrays

    @property
    def num_rows(self) -> int:
        return int(self.counts[ROWS])

    @property
    def pool_used(self) -> int:
        return int(self.counts[POOL_USED])

    @property
    def rows_built(self) -> int:
        return int(self.counts[ROWS])

    @property
    def steps_used(self) -> int:
        return int(self.counts[STEPS_USED])

    # Rows -------------------------------------------------------------------------
    def reserve_row(self) -> bool:
        """Makes room for the next row in the per-row arrays; True when they had to grow
        (a compiled row builder gives up where they are full)."""
        if self.rows_built < self.row_start.shape[0]:
            return False
        self._walk_arrays = None
        grow = 2 * self.row_start.shape[0]
        self.row_start = grown(self.row_start, grow, 0)
        self.row_end = grown(self.row_end, grow, 0)
        self.row_accepting = grown(self.row_accepting, grow, 0)
        self.ks_ctx = grown(self.ks_ctx, 4 * grow, 0)
        return True

    def _make_row(self, parent: int, lexemes: np.ndarray, kpos: np.ndarray, korigin: np.ndarray) -> int:
        counts = self.counts
        row_id = int(counts[ROWS])
        self.reserve_row()
        while True:
            counts[EPOCH] += 1
            args = (
                row_id,
                int(counts[EPOCH]),
                parent,
                lexemes,
                kpos,
                korigin,
                kpos.shape[0],
                self.dot_symbol,
                self.dot_lhs,
                self.nullable,
                self.accept_pos,
                self.pred_start,
                self.pred_end,
                self.pred_pool,
                self.prednt_start,
                self.prednt_end,
                self.prednt_pool,
                self.row_start,
                self.row_end,
                self.row_accepting,
                self.adv_sym,
                self.adv_pos,
                self.adv_origin,
                int(counts[POOL_USED]),
                self._hkeys,
                self._hstamp,
                self._pstamp,
                self._ntstamp,
                self._work_pos,
                self._work_origin,
                self._item_pos,
                self._item_origin,
                self._pred_list,
                self._allowed_out,
                self.limits.max_items_per_row,
                self.ks_role,
                self.ks_req_ptr,
                self.ks_req_keys,
                self.ks_ctx,
                self.key_stamp,
            )
            build = self._build
            if build is None:
                build = self._build = compiled_once(self._build_fn, args)
            status, value, n_allowed = build(*args)
            if status == ROW_BUILT:
                counts[POOL_USED] += value
                counts[ROWS] += 1
                # What the recognizer asks next, for the row it just made.
                self.last_allowed = (row_id, self._allowed_out[:n_allowed].copy())
                return row_id
            if status == NEED_PREDICTION:
                for nt in self._allowed_out[:n_allowed].tolist():
                    self._add_prediction(nt)
            elif status == NOTHING_SCANS:
                return -1
            elif status == NEED_POOL:
                self._walk_arrays = None
                grow = max(int(counts[POOL_USED]) + int(value), 2 * self.adv_sym.shape[0])
                self.adv_sym = grown(self.adv_sym, grow, 0)
                self.adv_pos = grown(self.adv_pos, grow, 0)
                self.adv_origin = grown(self.adv_origin, grow, 0)
            elif status == NEED_SCRATCH and self._item_pos.shape[0] <= self.limits.max_items_per_row:
                self._size_scratch(2 * self._item_pos.shape[0])
            else:
                raise LimitExceeded("max_items_per_row", self.limits.max_items_per_row, "grammar too ambiguous")

    def _size_scratch(self, items: int) -> None:
        self._walk_arrays = None
        self._hkeys = np.zeros(_pow2_at_least(4 * items), dtype=np.int64)
        self._hstamp = filled(self._hkeys.shape[0], -1, dtype=np.int64)
        self._work_pos = np.zeros(4 * items, dtype=np.int64)
        self._work_origin = np.zeros(4 * items, dtype=np.int64)
        self._item_pos = np.zeros(items, dtype=np.int64)
        self._item_origin = np.zeros(items, dtype=np.int64)
        self._pred_list = np.zeros(items + self._pstamp.shape[0], dtype=np.int64)
        self._allowed_out = np.zeros(items + self._pstamp.shape[0], dtype=np.int64)

    def _add_prediction(self, nt: int) -> None:
        """Stores `nt`'s prediction closure (predict_closure_py), growing the pools first
        when they might not hold it. Computed once per nonterminal per grammar, here or
        by the mask walk itself."""
        counts = self.counts
        need = int(counts[PRED_USED]) + self._pstamp.shape[0]
        if need > self.pred_pool.shape[0]:
            self.pred_pool = grown(self.pred_pool, max(need, 2 * self.pred_pool.shape[0]), 0)
            self._walk_arrays = None  # compiled callers must see the new pool
        need = int(counts[PREDNT_USED]) + self._ntstamp.shape[0]
        if need > self.prednt_pool.shape[0]:
            self.prednt_pool = grown(self.prednt_pool, max(need, 2 * self.prednt_pool.shape[0]), 0)
            self._walk_arrays = None
        counts[EPOCH] += 1
        args = (
            nt,
            int(counts[EPOCH]),
            self.rule_ptr,
            self.rule_first,
            self.dot_symbol,
            self.nullable,
            self._pstamp,
            self._ntstamp,
            self._closure_stack,
            self._closure_todo,
            counts,
            self.pred_start,
            self.pred_end,
            self.pred_pool,
            self.prednt_start,
            self.prednt_end,
            self.prednt_pool,
        )
        closure = self._closure
        if closure is None:
            closure = self._closure = compiled_once(self._closure_fn, args)
        if not closure(*args):
            raise AssertionError("prediction pools were grown to hold any closure")

    def scan(self, row_id: int, lexset_id: int, lexemes: frozenset[int]) -> int:
        """The row after scanning any of `lexemes` in row `row_id`, or -1 if none is expected.
        Every call builds a new row: callers keep the answer (the recognizer's step table)."""
        self.counts[STEPS_USED] += 1
        if self.counts[STEPS_USED] > self.limits.parser_fuel:
            raise LimitExceeded("parser_fuel", self.limits.parser_fuel, "too many Earley rows built")
        arr = self._lexeme_arrays.get(lexset_id)
        if arr is None or arr.shape[0] != len(lexemes):
            arr = np.array(sorted(lexemes), dtype=np.int64)
            self._lexeme_arrays[lexset_id] = arr
        return self._make_row(row_id, arr, self._no_lexemes, self._no_lexemes)

    def allowed_array(self, row_id: int) -> np.ndarray:
        """The lexemes row `row_id` expects, sorted (int64)."""
        if self.last_allowed[0] == row_id:
            return self.last_allowed[1]
        lo, hi = int(self.row_start[row_id]), int(self.row_end[row_id])
        syms = self.adv_sym[lo:hi]
        n = int(np.searchsorted(syms, 0))  # lexemes are the negative symbols, first
        return np.unique(-1 - syms[:n])

    def allowed_lexemes(self, row_id: int) -> frozenset[int]:
        hit = self._allowed.get(row_id)
        if hit is None:
            hit = frozenset(self.allowed_array(row_id).tolist())
            if len(self._allowed) < 4096:
                self._allowed[row_id] = hit
        return hit

    def is_accepting(self, row_id: int) -> bool:
        return bool(self.row_accepting[row_id])

    def row_items(self, row_id: int) -> list[tuple[int, int, int]]:
        """(symbol, advanced position, origin) entries of a row, sorted; for tests."""
        lo, hi = int(self.row_start[row_id]), int(self.row_end[row_id])
        return sorted(
            zip(
                self.adv_sym[lo:hi].tolist(),
                self.adv_pos[lo:hi].tolist(),
                self.adv_origin[lo:hi].tolist(),
                strict=False,
            )
        )

    def expected_names(self, row_id: int) -> list[str]:
        return sorted(self.grammar.lexemes[i].name for i in self.allowed_lexemes(row_id))


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p
