"""Token masks: the trie walk driven by the recognizer's flat tables.

The walk visits the token trie in DFS order, keeping a recognizer state per depth.
At each node it reads one byte: a lexer table lookup, and at a lexeme boundary a
lookup in the parser-step hash table and the new row's start lexer state. A rejected
byte skips the node's whole subtree. Tokens ending at a surviving node are allowed.

Tables are filled lazily, so the walk can meet an entry that is not computed yet. A
missing parser step is built inside the walk (the compiled Earley row builder of
parser.py, entered in the step table at once), and so is a missing lexer transition
whose derivatives are known (the compiled step of lexer.py). What needs Python — a
derivative not computed yet, a new state's lexeme set, a lexeme set's start state
never met, a table to grow — returns where the walk stopped and what it needs
(`NEED_LEXER`, `NEED_PARSER`); the caller computes it and resumes at the same node,
with the per-depth stacks untouched. Nothing is ever recomputed from scratch.

A mask is computed in two parts. Tokens that stay inside the current lexeme depend
only on the lexer state, so that part is kept per lexer state together with its
frontier, the subtrees where a lexeme ends and the Earley row decides; the next row
met in the same lexer state (the next string value, the next array element) walks
only the frontier.

Finished masks are kept in `MASK_CACHE` (a byte-bounded LRU keyed by recognizer, trie
and state): decoding revisits states constantly (every position inside a string is
one state), and most MaskBench masks are such revisits. The cache hands out its own
array, read-only (callers that need to change a mask copy it), instead of a walk.

`walk_py` is the plain-Python twin of the compiled `walk_jit` (the very same code,
uncompiled, calling the plain twins of the row builder); `reference_mask` is an
independent definition (every token's bytes through `Recognizer.step`) that tests
compare both against.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from . import _views
from . import lexer as lexer_module
from . import parser as parser_module
from . import trie as trie_module
from ._jit import at, compiled_for, compiled_once, njit, njit_calling, unpack_group
from ._views import pack, view_1d, view_2d
from .lexer import (
    CHAR_START,
    CORE_START_MARKER,
    CORE_STATES,
    COUNT_LEFT_MASK,
    COUNT_ROW_SHIFT,
    COUNT_UNKNOWN,
    DEAD,
    FLOOR_HI_SHIFT,
    FLOOR_ROW_MASK,
    IGNORE_ONLY,
    NARROW_BYTES_MASK,
    NARROW_SHIFT,
    NO_ACCEPT,
    NO_CEILING,
    NO_NARROWING,
    STEP_ARRAYS_SPEC,
    UNKNOWN,
    lex_step_py,
    start_state_py,
)
from .parser import (
    EPOCH,
    NEED_PREDICTION,
    NOTHING_SCANS,
    POOL_USED,
    ROW_BUILT,
    ROWS,
    STEPS_USED,
    build_row_jit,
    build_row_py,
    predict_closure_jit,
    predict_closure_py,
)
from .recognizer import (
    LEXSET_BITS,
    NO_ROW,
    SCAN_IN_PYTHON,
    START_COUNT,
    START_POOL_USED,
    STEP_EMPTY,
    Recognizer,
)
from .regex import RepeatBounds
from .regex.analysis import CHAIN_WALK_FIELDS, chain_search_py
from .slicer import applicable_slices
from .trie import (
    RECORD_DEPTH_MASK,
    RECORD_DEPTH_SHIFT,
    RECORD_SEVERAL,
    RECORD_SUBTREE_MASK,
    RECORD_SUBTREE_SHIFT,
    RECORD_TOKEN_MASK,
    RECORD_TOKEN_SHIFT,
    TokenTrie,
    deepest_py,
    mask_words,
    node_for_py,
)

DONE = 0
NEED_LEXER = 1  # (lexer state, byte) missing from the lexer table
NEED_PARSER = 2  # (row, lexeme set) missing from the parser step table
NEED_SPACE = 3  # the frontier array is full
NEED_EXIT = 4  # (lexer state, depth): where a counted walk goes on once no character is left

# A walk's stack_lex entry: the lexer state in the low bits; in a counted walk (walk_py)
# one more than the characters left above them, the phase of a counted repetition's
# walk (PHASE_FLOOR, PHASE_CEILING; 0 for a length limit's), and the row of the
# characters' automaton above that.
STACK_LEFT_SHIFT = 32
STACK_STATE_MASK = (1 << STACK_LEFT_SHIFT) - 1
STACK_PHASE_SHIFT = 48
STACK_ROW_SHIFT = 50
STACK_LEFT_MASK = (1 << (STACK_PHASE_SHIFT - STACK_LEFT_SHIFT)) - 1
PHASE_FLOOR = 1  # characters to go before anything else may come
PHASE_CEILING = 2  # characters still allowed; the tail may start between them
assert lexer_module.COUNT_ROW_LIMIT <= 1 << (63 - STACK_ROW_SHIFT)
assert lexer_module.COUNT_LEFT_MASK <= STACK_LEFT_MASK


def walk_py(
    node_records,
    tok_start,
    tok_end,
    node_tokens,
    deepest_below,
    lex_table,
    lex_accept,
    lex_narrow,
    lex_counted,
    lex_floor,
    char_next,
    row_lexstate,
    step_keys,
    step_vals,
    stack_lex,
    stack_row,
    ranges,
    range_idx,
    node,
    stop_at_first,
    mask,
    stats,
    base_row,
    frontier,
    frontier_count,
    record_frontier,
    parser_arrays,
    scan_arrays,
    lex_arrays,
):
    """Walks the trie node ranges `ranges[range_idx:]`, starting at `node`; returns
    (status, range_idx, node, a, b).

    A range is [start, end, lexer state]: when the lexer state is -1 the nodes sit
    below the base state already on the stacks, else the range is a subtree whose
    parent is in that lexer state and row `base_row` (a frontier, see below).

    With `stop_at_first`, returns (DONE, range_idx, node, 1, 0) at the first allowed
    token's node. stats[0] counts visited nodes.

    A parser step missing from the step table is computed here (`scan_in_walk`, with
    the parser's and recognizer's arrays, prediction closures included); only what
    needs Python (a new lexer start state, a table to grow) returns NEED_PARSER. So is a
    missing lexer entry (`lex_step`, with Lexer.step_arrays as `lex_arrays`), and
    NEED_LEXER only when that gives up.

    With `record_frontier`, the walk never leaves the current lexeme: a node whose
    byte would end it is recorded in `frontier[frontier_count[0]]` as a range
    [node, end of its subtree, lexer state before it], not walked. What lies inside
    the lexeme depends only on the lexer state; the frontier is where the row
    matters, so a mask for another row in the same lexer state walks only that.

    `lex_narrow[s]`, unless NO_NARROWING, holds a state t and a number of bytes m
    (`t << NARROW_SHIFT | m`, see Lexer.narrowing): a walk of at most m bytes from
    t allows the same tokens as from s and ends lexemes at the same nodes. A node whose
    tokens are that short (`deepest_below`) and its subtree are walked from t.

    Where the tokens are longer and s is a length limit the walk counts
    (`lex_counted[s]`, see Lexer.count_entry: `(A & C{0,m})·T` or `C{0,m}·T` for a code
    C of characters, t is `A·T`), the subtree is walked from t all the same, counting
    the characters it reads with C's automaton (`char_next`, a row per state, -1 where
    a byte starts no character); the count left and the automaton's row ride in
    `stack_lex` above the state. Where the last character allowed ends, the walk goes on
    from the exact state, `lex_counted` of the twin's state there (Lexer.count_exit;
    NEED_EXIT while not worked out). So a string's count left takes no lexer state of
    its own down a vocabulary's long runs.

    A counted repetition (`lex_floor[s]`, see Lexer.narrowing: `C{lo,hi}·T`) is walked
    by C's automaton, counting characters with s itself on the stack: first the lo to
    go, where a byte that starts no character ends the path, then (where the floor
    holds a ceiling) the hi - lo still allowed, where a byte that starts no character
    at a character's end starts T instead, from T's state. Once the last character is
    read the walk goes on from t (`lex_narrow[s]`): T's state, or `C{0,hi-lo}·T` after
    a floor without a ceiling.
    """
    slot_mask = step_keys.shape[0] - 1
    n_ranges = ranges.shape[0]
    # Counted in a local: a store to stats on every node kept the compiled loop from
    # holding the count in a register.
    visited = 0
    while range_idx < n_ranges:
        end_node = ranges[range_idx, 1]
        if node == ranges[range_idx, 0] and ranges[range_idx, 2] >= 0:
            parent = ((node_records[node] >> RECORD_DEPTH_SHIFT) & RECORD_DEPTH_MASK) - 1
            stack_lex[parent] = ranges[range_idx, 2]
            stack_row[parent] = base_row
        while node < end_node:
            record = node_records[at(node)]
            depth = (record >> RECORD_DEPTH_SHIFT) & RECORD_DEPTH_MASK
            lexstate = stack_lex[at(depth - 1)]
            left = -1
            phase = 0
            if lexstate <= STACK_STATE_MASK:
                narrow = lex_narrow[at(lexstate)]
                if narrow != NO_NARROWING and deepest_below[at(node)] - depth + 1 <= (narrow & NARROW_BYTES_MASK):
                    lexstate = narrow >> NARROW_SHIFT
                elif narrow != NO_NARROWING:
                    count = lex_floor[at(lexstate)]
                    if count >= 0:
                        crow = (count >> COUNT_ROW_SHIFT) & FLOOR_ROW_MASK
                        left = count & COUNT_LEFT_MASK
                        phase = PHASE_FLOOR
                        if left == 0:
                            left = (count >> FLOOR_HI_SHIFT) & COUNT_LEFT_MASK
                            phase = PHASE_CEILING
                    else:
                        count = lex_counted[at(lexstate)]
                        if count >= 0:
                            left = count & COUNT_LEFT_MASK
                            crow = count >> COUNT_ROW_SHIFT
                            lexstate = narrow >> NARROW_SHIFT
            else:
                left = ((lexstate >> STACK_LEFT_SHIFT) & STACK_LEFT_MASK) - 1
                phase = (lexstate >> STACK_PHASE_SHIFT) & 3
                crow = lexstate >> STACK_ROW_SHIFT
                lexstate &= STACK_STATE_MASK
            byte = record & 0xFF
            visited += 1
            if phase != 0:
                following = char_next[at(crow), at(byte)]
                if following >= 0:
                    crow = following
                    if char_next[at(crow), CHAR_START] == 1:
                        left -= 1
                    if left == 0:
                        count = lex_floor[at(lexstate)]
                        hi = (count >> FLOOR_HI_SHIFT) & COUNT_LEFT_MASK
                        if phase == PHASE_FLOOR and hi != NO_CEILING and hi > (count & COUNT_LEFT_MASK):
                            left = hi - (count & COUNT_LEFT_MASK)
                            phase = PHASE_CEILING
                    if left == 0:
                        stack_lex[at(depth)] = lex_narrow[at(lexstate)] >> NARROW_SHIFT
                    else:
                        stack_lex[at(depth)] = (
                            np.int64(lexstate)
                            | (np.int64(left + 1) << STACK_LEFT_SHIFT)
                            | (np.int64(phase) << STACK_PHASE_SHIFT)
                            | (np.int64(crow) << STACK_ROW_SHIFT)
                        )
                elif phase == PHASE_CEILING and char_next[at(crow), CHAR_START] == 1:
                    # Between characters, a byte that starts none starts the tail, from its
                    # state, which takes no empty word: no lexeme ends here.
                    tail = lex_narrow[at(lexstate)] >> NARROW_SHIFT
                    nxt = lex_table[at(tail), at(byte)]
                    if nxt == UNKNOWN:
                        nxt = lex_step(np.int64(tail), byte, lex_table, lex_accept, lex_arrays)
                        if nxt == UNKNOWN:
                            stats[0] += visited
                            return NEED_LEXER, range_idx, node, tail, byte
                    if nxt == DEAD:
                        node += (record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK
                        continue
                    stack_lex[at(depth)] = nxt
                else:
                    node += (record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK
                    continue
                stack_row[at(depth)] = stack_row[at(depth - 1)]
            else:
                nxt = lex_table[at(lexstate), at(byte)]
                if nxt == UNKNOWN:
                    # np.int64: the state's type at every call (one compiled lex_step).
                    nxt = lex_step(np.int64(lexstate), byte, lex_table, lex_accept, lex_arrays)
                    if nxt == UNKNOWN:
                        stats[0] += visited
                        return NEED_LEXER, range_idx, node, lexstate, byte
                if nxt == DEAD:
                    accepted = lex_accept[at(lexstate)]
                    if accepted == NO_ACCEPT:
                        node += (record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK
                        continue
                    if record_frontier:
                        c = frontier_count[0]
                        if c >= frontier.shape[0]:
                            stats[0] += visited - 1
                            return NEED_SPACE, range_idx, node, 0, 0
                        frontier[c, 0] = node
                        frontier[c, 1] = node + ((record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK)
                        frontier[c, 2] = lexstate
                        frontier_count[0] = c + 1
                        node += (record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK
                        continue
                    row = stack_row[at(depth - 1)]
                    if accepted != IGNORE_ONLY:
                        key = (row << LEXSET_BITS) | accepted
                        slot = (row * 1000003 + accepted * 7919) & slot_mask
                        while True:
                            found = step_keys[at(slot)]
                            if found == key:
                                row = step_vals[at(slot)]
                                break
                            if found == STEP_EMPTY:
                                child = scan_in_walk(
                                    row,
                                    accepted,
                                    key,
                                    slot,
                                    step_keys,
                                    step_vals,
                                    row_lexstate,
                                    parser_arrays,
                                    scan_arrays,
                                    lex_table,
                                    lex_accept,
                                    lex_arrays,
                                )
                                if child == SCAN_IN_PYTHON:
                                    stats[0] += visited
                                    return NEED_PARSER, range_idx, node, row, accepted
                                row = child
                                break
                            slot = (slot + 1) & slot_mask
                        if row < 0:
                            node += (record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK
                            continue
                    start = row_lexstate[at(row)]
                    nxt = lex_table[at(start), at(byte)]
                    if nxt == UNKNOWN:
                        nxt = lex_step(np.int64(start), byte, lex_table, lex_accept, lex_arrays)
                        if nxt == UNKNOWN:
                            stats[0] += visited
                            return NEED_LEXER, range_idx, node, start, byte
                    if nxt == DEAD:
                        node += (record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK
                        continue
                    stack_row[at(depth)] = row
                    left = -1
                else:
                    stack_row[at(depth)] = stack_row[at(depth - 1)]
                    if left >= 0:
                        following = char_next[at(crow), at(byte)]
                        if following < 0:
                            left = -1  # no character: past the limit's part, twin and exact agree
                        else:
                            crow = following
                            if char_next[at(crow), CHAR_START] == 1:
                                left -= 1
                                if left == 0:
                                    # The last character allowed: on from the exact state,
                                    # which is DEAD where the pattern cannot end here.
                                    exact = lex_counted[at(nxt)]
                                    if exact == COUNT_UNKNOWN:
                                        stats[0] += visited
                                        return NEED_EXIT, range_idx, node, nxt, depth
                                    nxt = exact
                                    left = -1
                                    if nxt == DEAD:
                                        node += (record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK
                                        continue
                if left < 0:
                    stack_lex[at(depth)] = nxt
                else:
                    # In int64: the plain twin's numpy int32 would overflow.
                    stack_lex[at(depth)] = (
                        np.int64(nxt) | (np.int64(left + 1) << STACK_LEFT_SHIFT) | (np.int64(crow) << STACK_ROW_SHIFT)
                    )
            token = (record >> RECORD_TOKEN_SHIFT) & RECORD_TOKEN_MASK
            if token:
                if token != RECORD_SEVERAL:
                    t = token - 1
                    mask[at(t >> 5)] |= np.uint32(1) << np.uint32(t & 31)
                else:
                    for k in range(tok_start[at(node)], tok_end[at(node)]):
                        t = node_tokens[at(k)]
                        mask[at(t >> 5)] |= np.uint32(1) << np.uint32(t & 31)
                if stop_at_first:
                    stats[0] += visited
                    return DONE, range_idx, node, 1, 0
            node += 1
        range_idx += 1
        if range_idx < n_ranges:
            node = ranges[range_idx, 0]
    stats[0] += visited
    return DONE, range_idx, node, 0, 0


# Parser.walk_arrays and Recognizer.scan_arrays, member by member (see
# _views.parse_spec): tuples, or packed by address for the compiled walk.
PARSER_GROUP_SPEC = "qqq?#" + "q" * 8 + "?" + "iii" + "q" * 10 + "##" + "q" * 10
SCAN_GROUP_SPEC = "q" * 10


def scan_in_walk_py(
    row,
    lexset,
    key,
    slot,
    step_keys,
    step_vals,
    row_lexstate,
    parser_arrays,
    scan_arrays,
    lex_table,
    lex_accept,
    lex_arrays,
):
    """The child of `row` after lexeme set `lexset`, built and entered in the step table
    at `slot` (the free slot the walk's probe ended on); NO_ROW if nothing scans;
    SCAN_IN_PYTHON when Python must do it (tables or pools to grow, a lexeme set not
    mirrored yet, a start state that accepts a lexeme, fuel spent). A missing prediction
    closure is made here, and so is the start lexer state of a lexeme set not met yet."""
    (
        counts,
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
        p_row_accepting,
        adv_sym,
        adv_pos,
        adv_origin,
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
        parser_fuel,
        no_kernel,
        rule_ptr,
        rule_first,
        closure_stack,
        closure_todo,
        ks_role,
        ks_req_ptr,
        ks_req_keys,
        ks_ctx,
        key_stamp,
    ) = unpack_group(parser_arrays, PARSER_GROUP_SPEC)
    (
        step_fill,
        lexset_ptr,
        lexset_lex,
        n_lexsets,
        start_keys,
        start_val,
        start_ptr,
        start_len,
        start_pool,
        start_fill,
    ) = unpack_group(scan_arrays, SCAN_GROUP_SPEC)
    child = counts[ROWS]
    if (
        lexset >= n_lexsets[0]
        or child >= row_start.shape[0]
        or 4 * child + 4 > ks_ctx.shape[0]
        or child >= row_lexstate.shape[0]
        or 2 * (step_fill[0] + 1) > step_keys.shape[0]
        or counts[STEPS_USED] >= parser_fuel
    ):
        return SCAN_IN_PYTHON
    lexemes = lexset_lex[lexset_ptr[lexset] : lexset_ptr[lexset + 1]]
    while True:
        counts[EPOCH] += 1
        status, used, n_allowed = build_row(
            child,
            counts[EPOCH],
            row,
            lexemes,
            no_kernel,
            no_kernel,
            no_kernel.shape[0],
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
            p_row_accepting,
            adv_sym,
            adv_pos,
            adv_origin,
            counts[POOL_USED],
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
        )
        if status != NEED_PREDICTION:
            break
        # The pass named every nonterminal it lacked; a closure is made once each.
        for i in range(n_allowed):
            counts[EPOCH] += 1
            if not predict_closure(
                allowed_out[i],
                counts[EPOCH],
                rule_ptr,
                rule_first,
                dot_symbol,
                nullable,
                pstamp,
                ntstamp,
                closure_stack,
                closure_todo,
                counts,
                pred_start,
                pred_end,
                pred_pool,
                prednt_start,
                prednt_end,
                prednt_pool,
            ):
                return SCAN_IN_PYTHON  # a pool to grow
    if status == NOTHING_SCANS:
        result = NO_ROW
    elif status != ROW_BUILT:
        return SCAN_IN_PYTHON
    else:
        # The new row's start lexer state, by its expected lexemes (see
        # Recognizer.start_state_of); for a set not seen yet it is made here, as the
        # lexer's initial_state makes it, unless Python must (then the row built so far
        # is simply built again there).
        h = 0
        for i in range(n_allowed):
            h = (h * 31 + allowed_out[i] + 1) & 0xFFFFFFFFFF
        size_mask = start_keys.shape[0] - 1
        s = h & size_mask
        lexstate = -1
        while start_keys[s] != -1:
            if start_keys[s] == h and start_len[s] == n_allowed:
                base = start_ptr[s]
                same = True
                for i in range(n_allowed):
                    if start_pool[base + i] != allowed_out[i]:
                        same = False
                        break
                if same:
                    lexstate = start_val[s]
                    break
            s = (s + 1) & size_mask
        if lexstate < 0:
            if (
                2 * (start_fill[START_COUNT] + 1) > start_keys.shape[0]
                or start_fill[START_POOL_USED] + n_allowed > start_pool.shape[0]
            ):
                return SCAN_IN_PYTHON
            # Rows built here are never the root: %ignore may come before their lexemes.
            lexstate = start_state(allowed_out, n_allowed, n_allowed > 0, lex_accept, lex_table.shape[0], lex_arrays)
            if lexstate < 0:
                return SCAN_IN_PYTHON
            at = start_fill[START_POOL_USED]
            for i in range(n_allowed):
                start_pool[at + i] = allowed_out[i]
            start_keys[s] = h
            start_val[s] = lexstate
            start_ptr[s] = at
            start_len[s] = n_allowed
            start_fill[START_COUNT] += 1
            start_fill[START_POOL_USED] = at + n_allowed
        counts[ROWS] += 1
        counts[POOL_USED] += used
        row_lexstate[child] = lexstate
        result = child
    counts[STEPS_USED] += 1
    step_keys[slot] = key
    step_vals[slot] = result
    step_fill[0] += 1
    return result


def step_child_py(
    row, lexset, lex_table, lex_accept, row_lexstate, step_keys, step_vals, parser_arrays, scan_arrays, lex_arrays
):
    """The step table's child of `row` after lexeme set `lexset`, built and entered by
    `scan_in_walk` where missing: what the walk does at a lexeme's end, for a caller
    outside the walk (fast-forward, consuming). NO_ROW if nothing scans; SCAN_IN_PYTHON
    where Python must build it. The walk keeps its own inline copy of this probe: a
    call to this function from its loop made every walk slower (docs/optimizations.md)."""
    key = (row << LEXSET_BITS) | lexset
    slot_mask = step_keys.shape[0] - 1
    slot = (row * 1000003 + lexset * 7919) & slot_mask
    while True:
        found = step_keys[slot]
        if found == key:
            return int(step_vals[slot])
        if found == STEP_EMPTY:
            return scan_in_walk(
                row,
                lexset,
                key,
                slot,
                step_keys,
                step_vals,
                row_lexstate,
                parser_arrays,
                scan_arrays,
                lex_table,
                lex_accept,
                lex_arrays,
            )
        slot = (slot + 1) & slot_mask


def tokens_part_within_py(mask, heads, lengths, depth):
    """True when two tokens `mask` allows differ at one of their first `depth` bytes
    (at most heads.shape[1] are looked at); `heads` and `lengths` are the trie's token
    heads.

    Each position keeps the byte of the first allowed token long enough to have one; a
    later token with another byte there differs from that token at that position or
    before. Where the nearest parting of two tokens is at position p < depth, the pair
    (or a third token) meets a kept byte it differs from at p, so nothing is missed."""
    # The kept bytes, one per 8 bits, and which positions have one: scalars, so that the
    # call allocates nothing.
    kept = 0
    known = 0
    vocab = heads.shape[0]
    depth = min(depth, heads.shape[1])  # a deeper parting is not known: "not known" is False
    n = mask.shape[0]
    w = 0
    while True:
        # A narrow mask is nearly all zero words: a loop of its own passes them.
        while w < n and mask[at(w)] == 0:
            w += 1
        if w >= n:
            return False
        word = mask[at(w)]
        for bit in range(32):
            if (word >> bit) & 1:
                token = w * 32 + bit
                if token >= vocab:
                    return False
                for p in range(min(int(lengths[at(token)]), depth)):
                    byte = int(heads[at(token), at(p)])
                    if not (known >> p) & 1:
                        known |= 1 << p
                        kept |= byte << (8 * p)
                    elif (kept >> (8 * p)) & 0xFF != byte:
                        return True
        w += 1


tokens_part_within_jit = njit(tokens_part_within_py)
_MAX_PARTINGS_KEPT = 1 << 16  # states whose partings a walk space remembers
_NEVER_PARTS = 1 << 30  # no depth yet answered True


def live_bytes_py(lexstate, lex_table, lex_arrays, live):
    """Marks in `live` (256 flags) the bytes `lexstate` goes on with; False where that
    needs Python. Read off the state's table row, and for entries missing there off the
    derivatives published for its regexes (the codes `lex_step` would make the entry
    from): a literal's chain publishes every byte's, so past where the mask walk went no
    state is made to learn which byte goes on."""
    unknown = False
    for b in range(256):
        t = lex_table[at(lexstate), b]
        if t == UNKNOWN:
            unknown = True
        elif t != DEAD:
            live[b] = True
    if not unknown:
        return True
    core, st_ptr, comp_lex, comp_expr, _, _, der_base, cmap_of, cmaps, pool, _ = unpack_group(
        lex_arrays, STEP_ARRAYS_SPEC
    )
    if lexstate >= core[CORE_STATES]:
        return False
    marker = core[CORE_START_MARKER]
    first = st_ptr[at(lexstate)]
    last = st_ptr[at(lexstate + 1)]
    for b in range(256):
        if lex_table[at(lexstate), b] != UNKNOWN:
            continue
        for j in range(first, last):
            if comp_lex[at(j)] == marker:
                continue
            e = comp_expr[at(j)]
            if e >= der_base.shape[0]:
                return False
            base = der_base[at(e)]
            if base < 0:
                return False
            code = pool[at(base + cmaps[at(cmap_of[at(e)]), b])]
            if code < 0:
                return False
            if code >> 1 != 0:
                live[b] = True
                break
    return True


def allowed_bytes_py(
    lexstate,
    row,
    lex_table,
    lex_accept,
    row_lexstate,
    step_keys,
    step_vals,
    parser_arrays,
    scan_arrays,
    lex_arrays,
    live,
):
    """Marks in `live` the bytes recognizer state (lexstate, row) allows, as
    `Recognizer.allowed_byte_mask` (the lexeme goes on, or ends and the next one
    starts); returns the row after the lexeme ends (NO_ROW where it cannot), or
    SCAN_IN_PYTHON where Python must tell."""
    live[:] = False
    if not live_bytes(lexstate, lex_table, lex_arrays, live):
        return SCAN_IN_PYTHON
    accepted = lex_accept[at(lexstate)]
    if accepted == NO_ACCEPT:
        return NO_ROW
    after = row
    if accepted != IGNORE_ONLY:
        after = step_child(
            row,
            np.int64(accepted),
            lex_table,
            lex_accept,
            row_lexstate,
            step_keys,
            step_vals,
            parser_arrays,
            scan_arrays,
            lex_arrays,
        )
        if after == SCAN_IN_PYTHON or after == NO_ROW:
            return after
    if not live_bytes(row_lexstate[at(after)], lex_table, lex_arrays, live):
        return SCAN_IN_PYTHON
    return after


# Numbers of walk spaces' variants in the mask cache's keys, never reused in a process.
_cache_ids = itertools.count(1)

# Names the walk functions call, bound to the compiled callees in their compiled copies.
walk = walk_py
scan_in_walk = scan_in_walk_py
step_child = step_child_py
live_bytes = live_bytes_py
allowed_bytes = allowed_bytes_py
build_row = build_row_py
predict_closure = predict_closure_py
lex_step = lex_step_py
start_state = start_state_py
_PARSER_FILE = parser_module.__file__
_LEXER_FILE = lexer_module.__file__
_TRIE_FILE = trie_module.__file__
_hash_states_jit = njit(lexer_module.hash_states_py)
_VIEWS_FILE = _views.__file__
_intern_pairs_jit = njit_calling(lexer_module.intern_pairs_py, depends=(_VIEWS_FILE,), unpack_group=_views.unpack_group)
# What the lexer's kernels call, compiled.
_lexer_callees = dict(
    hash_states_py=_hash_states_jit, intern_pairs_py=_intern_pairs_jit, unpack_group=_views.unpack_group
)
lex_step_jit = njit_calling(lex_step_py, depends=(_VIEWS_FILE,), **_lexer_callees)
start_state_jit = njit_calling(start_state_py, depends=(_VIEWS_FILE,), **_lexer_callees)
scan_in_walk_jit = njit_calling(
    scan_in_walk_py,
    depends=(_PARSER_FILE, _LEXER_FILE, _VIEWS_FILE),
    unpack_group=_views.unpack_group,
    build_row=build_row_jit,
    predict_closure=predict_closure_jit,
    start_state=start_state_jit,
)
step_child_jit = njit_calling(
    step_child_py, depends=(_PARSER_FILE, _LEXER_FILE, _VIEWS_FILE), scan_in_walk=scan_in_walk_jit
)
walk_jit = njit_calling(
    walk_py,
    depends=(_PARSER_FILE, _LEXER_FILE, _TRIE_FILE, _VIEWS_FILE),
    scan_in_walk=scan_in_walk_jit,
    lex_step=lex_step_jit,
)

# The walk's arrays packed by address (_views.py) in five groups, each packed again only
# when an array of it is replaced: the trie's, the walker's and tables', the parser's
# (Parser.walk_arrays), the recognizer's (Recognizer.scan_arrays) and the lexer's
# (Lexer.step_arrays). The dtypes are what walk_packed reads them as; `pack` refuses
# arrays of other types.
_TRIE_DTYPES = (np.int64, np.int32, np.int32, np.int32, np.int32)
_TABLE_DTYPES = (np.int32, np.int32, np.int32, np.int64, np.int32) + (np.int64,) * 7 + (np.int32, np.int64)
# The groups' dtypes, and their scalars' places (which follow the arrays when packed).
_PARSER_DTYPES, _PARSER_SCALARS = _views.spec_dtypes(PARSER_GROUP_SPEC)
_SCAN_DTYPES, _SCAN_SCALARS = _views.spec_dtypes(SCAN_GROUP_SPEC)
_LEX_DTYPES, _ = _views.spec_dtypes(lexer_module.STEP_ARRAYS_SPEC)
_BOOK_DTYPES = (np.int64,) * 5


def _without(values: tuple, scalars: tuple[int, ...]) -> list:
    return [v for i, v in enumerate(values) if i not in scalars]


def _repack(cached: tuple | None, values: tuple, scalars: tuple[int, ...], dtypes: tuple) -> tuple:
    """(values, packed) for a group whose tuple changed. A group packed before is kept
    and rewritten in place: the entries of the arrays replaced (grown tables, most often
    one or two of the group) and the scalars. Its address does not change, so neither
    does the book that points to it."""
    if cached is not None:
        old, packed = cached
        k = 0
        for i, value in enumerate(values):
            if i in scalars:
                continue
            if value is not old[i]:
                _views.repoint(packed, k, value, dtypes)
            k += 1
        at = packed.shape[0] - len(scalars)
        for k, i in enumerate(scalars):
            packed[at + k] = values[i]
        return values, packed
    return values, pack(_without(values, scalars), dtypes, trailing=[values[i] for i in scalars])


# Packed trie arrays by id(trie), with weak references to the arrays they were packed
# from: every walker of every grammar walks the same few tries. Not kept on the trie,
# where deepcopy or pickle would carry the addresses over to a copy's new arrays.
_trie_packs: dict[int, tuple[tuple, np.ndarray]] = {}


def _trie_packed(trie: TokenTrie) -> np.ndarray:
    arrays = (trie.node_records, trie.tok_start, trie.tok_end, trie.node_tokens, trie.deepest_below)
    got = _trie_packs.get(id(trie))
    if got is None or any(ref() is not a for ref, a in zip(got[0], arrays, strict=False)):
        if len(_trie_packs) >= 64:
            for key in [k for k, (refs, _) in _trie_packs.items() if any(ref() is None for ref in refs)]:
                del _trie_packs[key]
        got = _trie_packs[id(trie)] = (tuple(weakref.ref(a) for a in arrays), pack(arrays, _TRIE_DTYPES))
    return got[1]


def walk_packed(book, ranges, range_idx, node, stop_at_first, mask, base_row, record_frontier):
    """`walk` with its long-lived arrays passed packed, and the five packed groups packed
    once more in `book` (compiled only; glue, not a twin: it rebuilds the arguments
    walk_py takes, less the parser's, recognizer's and lexer's groups, which stay packed
    down to the kernels that unpack them, see _views.unpack_group)."""
    t = view_1d(book, 0, np.int64)
    w = view_1d(book, 1, np.int64)
    return walk(
        view_1d(t, 0, np.int64),
        view_1d(t, 1, np.int32),
        view_1d(t, 2, np.int32),
        view_1d(t, 3, np.int32),
        view_1d(t, 4, np.int32),
        view_2d(w, 0, np.int32),
        view_1d(w, 1, np.int32),
        view_1d(w, 10, np.int64),
        view_1d(w, 11, np.int64),
        view_1d(w, 13, np.int64),
        view_2d(w, 12, np.int32),
        view_1d(w, 2, np.int32),
        view_1d(w, 3, np.int64),
        view_1d(w, 4, np.int32),
        view_1d(w, 5, np.int64),
        view_1d(w, 6, np.int64),
        ranges,
        range_idx,
        node,
        stop_at_first,
        mask,
        view_1d(w, 7, np.int64),
        base_row,
        view_2d(w, 8, np.int64),
        view_1d(w, 9, np.int64),
        record_frontier,
        view_1d(book, 2, np.int64),
        view_1d(book, 3, np.int64),
        view_1d(book, 4, np.int64),
    )


walk_packed_jit = njit_calling(walk_packed, depends=(_PARSER_FILE, _LEXER_FILE, _TRIE_FILE, _VIEWS_FILE), walk=walk_jit)


def scan_tables(book):
    """What a parser step outside the walk reads, from a walk's book (compiled only):
    the lexer table and accept array, the recognizer's row states and step table, and
    the parser's, recognizer's and lexer's packed groups."""
    w = view_1d(book, 1, np.int64)
    return (
        view_2d(w, 0, np.int32),
        view_1d(w, 1, np.int32),
        view_1d(w, 2, np.int32),
        view_1d(w, 3, np.int64),
        view_1d(w, 4, np.int32),
        view_1d(book, 2, np.int64),
        view_1d(book, 3, np.int64),
        view_1d(book, 4, np.int64),
    )


_scan_tables_jit = njit_calling(scan_tables, depends=(_VIEWS_FILE,))


def step_child_packed(book, row, lexset):
    """`step_child` with the arrays read from a walk's book (compiled only; glue, as
    walk_packed is): one argument instead of a dozen groups and tables."""
    return step_child(row, lexset, *scan_tables(book))


step_child_packed_jit = njit_calling(
    step_child_packed,
    depends=(_PARSER_FILE, _LEXER_FILE, _VIEWS_FILE),
    step_child=step_child_jit,
    scan_tables=_scan_tables_jit,
)


_live_bytes_jit = njit_calling(live_bytes_py, depends=(_LEXER_FILE, _VIEWS_FILE), unpack_group=_views.unpack_group)
_allowed_bytes_jit = njit_calling(
    allowed_bytes_py,
    depends=(_PARSER_FILE, _LEXER_FILE, _VIEWS_FILE),
    live_bytes=_live_bytes_jit,
    step_child=step_child_jit,
)


def heal_point_packed(book, forced, start, end_lexstate, end_row, node_byte, subtree_size, root_children, mask, ranges):
    """The first index from `start` on where some token spelling `forced[idx:]` and then
    more is allowed from (end_lexstate, end_row), the state after `forced`; or
    len(forced): `fastforward._heal_point` in one compiled call (compiled only; glue
    around `walk_packed`, whose book it reads). Returns (index, False), or (index, True)
    where the walk below that index's node needs Python: the caller decides that index
    and calls again from the next. `mask` is scratch for the walks; `ranges` one row."""
    t = view_1d(book, 0, np.int64)
    records = view_1d(t, 0, np.int64)
    w = view_1d(book, 1, np.int64)
    stack_lex = view_1d(w, 5, np.int64)
    stack_row = view_1d(w, 6, np.int64)
    frontier_count = view_1d(w, 9, np.int64)
    live = np.zeros(256, dtype=np.bool_)
    # The bytes the end state allows: a token one byte longer than a node, with such a
    # byte, settles that node without a walk (`"` inside an object: `":` is a token).
    known = allowed_bytes(end_lexstate, end_row, *scan_tables(book), live) != SCAN_IN_PYTHON
    size = forced.shape[0]
    for idx in range(start, size):
        node = node_for_py(node_byte, subtree_size, root_children, forced[idx:])
        if node < 0:
            continue
        end = node + ((records[node] >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK)
        if end - node <= 1:
            continue
        if known:
            c = node + 1
            for _ in range(8):
                if c >= end:
                    break
                record = records[c]
                if (record >> RECORD_TOKEN_SHIFT) & RECORD_TOKEN_MASK != 0 and live[record & 0xFF]:
                    return idx, False
                c += (record >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK
        depth = (records[node] >> RECORD_DEPTH_SHIFT) & RECORD_DEPTH_MASK
        stack_lex[depth] = end_lexstate
        stack_row[depth] = end_row
        frontier_count[0] = 0
        ranges[0, 0] = node + 1
        ranges[0, 1] = end
        ranges[0, 2] = -1
        status, _, _, found, _ = walk_packed(book, ranges, 0, node + 1, True, mask, end_row, False)
        if status != DONE:
            return idx, True
        if found:
            return idx, False
    return size, False


heal_point_packed_jit = njit_calling(
    heal_point_packed,
    depends=(_PARSER_FILE, _LEXER_FILE, _TRIE_FILE, _VIEWS_FILE),
    walk_packed=walk_packed_jit,
    allowed_bytes=_allowed_bytes_jit,
    scan_tables=_scan_tables_jit,
    node_for_py=trie_module.node_for_jit,
)


class MaskCache:
    """Finished masks by recognizer state, least recently used first out, within a byte
    budget shared by every recognizer in the process.

    A mask depends only on the recognizer, the trie and the state `(lexstate, row)`,
    and generation revisits states all the time: every position inside a JSON string
    or a comment is the same state, every new sequence starts in the initial one. A
    hit costs a dict lookup instead of a walk: the masks kept are read-only, and handed
    out as they are."""

    def __init__(self, budget_bytes: int):
        self.budget_bytes = budget_bytes
        # Keys: an int per recognizer state, a tuple per inside-lexeme part (MaskWalker).
        self._items: OrderedDict[Hashable, tuple] = OrderedDict()
        self._bytes = 0

    def get(self, key: Hashable) -> tuple | None:
        """`(mask, extra)` kept under `key`, or None."""
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit[0], hit[1]

    def put(self, key: Hashable, mask: np.ndarray, extra, extra_bytes: int = 0) -> None:
        """Keeps `(mask, extra)` under `key`; `extra_bytes` is what `extra` holds."""
        size = mask.nbytes + extra_bytes
        if size > self.budget_bytes or key in self._items:
            return
        self._items[key] = (mask, extra, size)
        self._bytes += size
        while self._bytes > self.budget_bytes:
            _, (_, _, old_size) = self._items.popitem(last=False)
            self._bytes -= old_size

    def clear(self) -> None:
        self._items.clear()
        self._bytes = 0


# 32 MiB: about 2,000 masks of a 128k vocabulary.
MASK_CACHE = MaskCache(32 << 20)


# Lexer states remembered as visited per recognizer and trie (at most about 7.5 MiB).
_MAX_SEEN_INSIDE = 1 << 16
# The most distinct long tokens a vocabulary's repeat search (`RepeatBounds`) reads;
# past it, a group's counts clamp by token length only.
_MAX_LONG_TOKENS = 4096


def spell_leaves_py(node_byte, node_depth, subtree_size, min_len, out, out_len):
    """Writes the bytes of each trie leaf at least `min_len` deep into the rows of `out`
    (its length into `out_len`), in preorder; returns how many."""
    path = np.zeros(deepest_py(node_depth) + 1, dtype=np.uint8)
    n = 0
    for node in range(1, node_depth.shape[0]):
        d = node_depth[node]
        path[d - 1] = node_byte[node]
        if d >= min_len and subtree_size[node] == 1:
            for k in range(d):
                out[n, k] = path[k]
            out_len[n] = d
            n += 1
    return n


_spell_leaves_jit = njit_calling(spell_leaves_py, depends=(_TRIE_FILE,), deepest_py=trie_module.deepest_jit)
_chain_search_jit = njit(chain_search_py)


def _load_chain_search() -> None:
    """One call on empty strings: loads the compiled chain search from numba's cache
    here, when the first walker of a trie is made, rather than in a mask."""
    none = np.zeros(0, dtype=np.int64)
    _chain_search_jit(
        np.zeros(0, dtype=np.uint8),
        np.zeros(1, dtype=np.int64),
        none,
        np.zeros((1, 256), dtype=np.int32),
        np.zeros(1, dtype=np.uint8),
        np.zeros((1, 1), dtype=np.int32),
        np.zeros(1, dtype=np.int32),
        1,
        np.zeros(CHAIN_WALK_FIELDS, dtype=np.int64),
        1,
    )


def _long_token_strings(trie: TokenTrie, min_len: int, use_jit: bool = True) -> list[bytes] | None:
    """The byte strings of the trie's leaves at least `min_len` bytes deep (every
    token that long is one of them or a prefix of one), longest first; None when there
    are more than _MAX_LONG_TOKENS."""
    depth = trie.node_depth
    count = int(np.count_nonzero((depth >= min_len) & (trie.subtree_size == 1)))
    if count > _MAX_LONG_TOKENS:
        return None
    if not count:
        return []
    out = np.zeros((count, int(depth.max())), dtype=np.uint8)
    out_len = np.zeros(count, dtype=np.int64)
    spell = _spell_leaves_jit if use_jit else spell_leaves_py
    spell(trie.node_byte, depth, trie.subtree_size, min_len, out, out_len)
    order = np.argsort(-out_len, kind="stable")
    return list(dict.fromkeys(out[i, : int(out_len[i])].tobytes() for i in order))


# Trie fingerprint -> its RepeatBounds: what a group's counts clamp at depends on the
# vocabulary only, so grammars share the answers.
_REPEAT_BOUNDS: dict[str, RepeatBounds] = {}


def repeat_bounds_for(trie: TokenTrie) -> RepeatBounds:
    """The trie's RepeatBounds. Its long tokens are spelled here, once per trie, when
    the first walker is made (a compiled pass, whose first call in a process also loads
    it), not in the middle of a mask: the searches read those of at least
    2 * (floor + 1) bytes (two-byte groups) or more."""
    got = _REPEAT_BOUNDS.get(trie.fingerprint)
    if got is None:
        least = 2 * (RepeatBounds.FLOOR + 1)
        spelled = _long_token_strings(trie, least)

        def long_strings(min_len: int) -> list[bytes] | None:
            if spelled is None or min_len < least:
                return None
            return [s for s in spelled if len(s) >= min_len]

        if len(_REPEAT_BOUNDS) >= 8:
            _REPEAT_BOUNDS.clear()
        _load_chain_search()
        got = _REPEAT_BOUNDS[trie.fingerprint] = RepeatBounds(trie.fingerprint, long_strings, _chain_search_jit)
    return got


class _WalkSpace:
    """The walk's scratch arrays (per-depth stacks, the frontier) and its packed argument
    groups, for one recognizer and trie. Every walker of that pair uses the same space:
    walks of one recognizer take turns under its lock, and a new matcher's first mask then
    finds the groups packed (packing a recognizer's 60-odd arrays took 40-80 µs).
    Held by the recognizer; it holds arrays, never the recognizer."""

    def __init__(self, trie: TokenTrie):
        depth = trie.max_depth + 2
        self.stack_lex = np.zeros(depth, dtype=np.int64)
        self.stack_row = np.zeros(depth, dtype=np.int64)
        self.stats = np.zeros(1, dtype=np.int64)
        self.frontier = np.zeros((256, 3), dtype=np.int64)
        self.frontier_count = np.zeros(1, dtype=np.int64)
        self.table_pack: tuple | None = None
        self.parser_pack: tuple | None = None
        # id(trie) -> (trie, its packed group, that group's entry in the book)
        self.trie_packs: dict[int, tuple[TokenTrie, np.ndarray, np.ndarray]] = {}
        self.scan_pack: tuple | None = None
        self.lex_pack: tuple | None = None
        self.book: np.ndarray | None = None
        self.book_groups: tuple = ()
        self.book_sources: tuple | None = None
        # Lexer state -> the state whose inside walk it shares, and clamped content ->
        # that state (see MaskWalker._representative): per recognizer and trie, as the
        # clamping depth is the trie's.
        self.representative: dict[int, int] = {}
        self.by_clamped: dict[tuple, int] = {}
        self.repeat_bounds: RepeatBounds | None = None
        # (representative, applicable slices) whose inside walk was once wanted
        # (MaskWalker._first_visit).
        self.seen_inside: set[tuple[int, tuple[bool, ...]]] = set()
        # Walk variant (compiled or plain, slices, split) -> its number in the mask cache's
        # keys (`MaskWalker._state_key`).
        self.cache_ids: dict[tuple, int] = {}
        # By state key, (the deepest depth `tokens_part_within` answered False, the
        # shallowest it answered True): a state's mask never changes and the answer grows
        # with the depth, while the fast-forward call asks two depths, again on its slow
        # path, and again when any matcher meets the state, each a scan of thousands of
        # words for a narrow mask.
        self.partings: dict[int, tuple[int, int]] = {}

    @staticmethod
    def of(rec: Recognizer, trie: TokenTrie) -> "_WalkSpace":
        spaces = rec.caches.walk_spaces
        got = spaces.get(id(trie))
        if got is None or got[0] is not trie:
            got = spaces[id(trie)] = (trie, _WalkSpace(trie))
        return got[1]


class MaskWalker:
    """Runs the resumable walk for one recognizer over a tokenizer's trie, or over its
    slice tries when a `SlicedTrie` is given (see slicer.py): all in one compiled call."""

    def __init__(
        self,
        trie: TokenTrie,
        rec: Recognizer,
        use_jit: bool = True,
        sliced=None,
        cache: MaskCache | None = MASK_CACHE,
        split_at_lexeme: bool = True,
        packed: bool = True,
    ):
        self.trie = trie
        self._split_at_lexeme = split_at_lexeme
        # A lexer state's first visit walks whole; its inside part is split off and
        # kept from the second visit on (_first_visit). Tests of the split turn it off.
        self.whole_walk_first_visit = True
        self.rec = rec
        self.sliced = sliced
        self._use_jit = use_jit
        self._walk_fn = walk_jit if use_jit else walk_py
        self.walk = None  # compiled for the argument types at the first walk
        self.cache = cache
        self.space = _WalkSpace.of(rec, trie)
        self._number_variant()
        if self.space.repeat_bounds is None:
            self.space.repeat_bounds = repeat_bounds_for(trie)
        self.last_sliced = False
        # (state key, its mask, the state as given): the mask most recently asked for,
        # read by `tokens_part_within`; one attribute, so that a reader without the lock
        # sees a matching triple. The state object itself answers the caller that passes
        # the same tuple again (the matcher does) without the key's arithmetic.
        self.last_mask: tuple[int, np.ndarray, tuple] | None = None
        self._tokens_part_fn = tokens_part_within_jit if use_jit else tokens_part_within_py
        # (compiled scan, token heads, their lengths), made at the first call: the scan is
        # compiled for the argument types it meets then.
        self._tokens_part: tuple | None = None
        # The state whose mask, the last asked for, holds tokens of two first bytes, known
        # without a scan (a sliced mask: `_slices_part`), or None. Nothing is forced
        # there, and the fast-forward call after such a mask (inside a string, mostly) is
        # answered by one comparison. A reader without the lock may see a later state's: it
        # compares the state object, and a state's answer never changes.
        self.last_parted: tuple | None = None
        self._slices_part_known: bool | None = None
        self._full_range = np.array([[1, trie.num_nodes, -1]], dtype=np.int64)
        self._range_cache: dict[tuple[bool, ...], np.ndarray] = {}
        self.limits_items = rec.limits.max_items_per_row
        self.limits_fuel = rec.limits.parser_fuel
        # The compiled walk takes its long-lived arrays packed by address (walk_packed);
        # `packed=False` passes them one by one, as the plain twin always does.
        self._packing = use_jit and packed
        self._walk_packed = None
        self._step_child = None
        self._heal_point = None
        self._heal_scratch: tuple[np.ndarray, np.ndarray] | None = None
        if self._packing:
            rec.caches.scanner = weakref.ref(self)

    def _packed(
        self, trie: TokenTrie, lexer, parser_arrays: tuple, scan_arrays: tuple, lex_arrays: tuple
    ) -> np.ndarray | None:
        """The book of the five packed groups for walk_packed, each group packed again only
        when one of its arrays was replaced; None when an array is not of the type
        walk_packed reads."""
        rec = self.rec
        space = self.space
        # Called before every walk, and nearly always nothing changed: ten identity
        # checks say so.
        sources = space.book_sources
        if (
            sources is not None
            and sources[1] is parser_arrays
            and sources[2] is scan_arrays
            and sources[3] is lex_arrays
            and sources[4] is lexer.table
            and sources[5] is lexer.accept
            and sources[10] is lexer.narrow
            and sources[11] is lexer.counted
            and sources[12] is lexer.char_next
            and sources[13] is lexer.floor
            and sources[6] is rec.row_lexstate
            and sources[7] is rec.step_keys
            and sources[8] is rec.step_vals
            and sources[9] is space.frontier
        ):
            if sources[0] is not trie:
                # A sliced walker goes back and forth between the whole trie and the
                # slice forest: only the book's first entry changes.
                got = space.trie_packs.get(id(trie))
                if got is None or got[0] is not trie:
                    return self._packed_again(trie, lexer, parser_arrays, scan_arrays, lex_arrays)
                book = space.book
                assert book is not None  # packed together with book_sources
                book[: _views.FIELDS] = got[2]
                space.book_groups = (got[1],) + space.book_groups[1:]
                space.book_sources = (trie,) + sources[1:]
            return space.book
        return self._packed_again(trie, lexer, parser_arrays, scan_arrays, lex_arrays)

    def _packed_again(
        self, trie: TokenTrie, lexer, parser_arrays: tuple, scan_arrays: tuple, lex_arrays: tuple
    ) -> np.ndarray | None:
        rec = self.rec
        space = self.space
        try:
            got = space.trie_packs.get(id(trie))
            if got is None or got[0] is not trie:
                packed = _trie_packed(trie)
                got = space.trie_packs[id(trie)] = (trie, packed, pack((packed,), _BOOK_DTYPES[:1]))
            trie_packed = got[1]
            cached = space.table_pack
            # The space's own stacks and counters are never replaced; the tables and the
            # frontier are, as they grow.
            if (
                cached is None
                or cached[0][0] is not lexer.table
                or cached[0][1] is not lexer.accept
                or cached[0][2] is not rec.row_lexstate
                or cached[0][3] is not rec.step_keys
                or cached[0][4] is not rec.step_vals
                or cached[0][8] is not space.frontier
                or cached[0][10] is not lexer.narrow
                or cached[0][11] is not lexer.counted
                or cached[0][12] is not lexer.char_next
                or cached[0][13] is not lexer.floor
            ):
                tables = (
                    lexer.table,
                    lexer.accept,
                    rec.row_lexstate,
                    rec.step_keys,
                    rec.step_vals,
                    space.stack_lex,
                    space.stack_row,
                    space.stats,
                    space.frontier,
                    space.frontier_count,
                    lexer.narrow,
                    lexer.counted,
                    lexer.char_next,
                    lexer.floor,
                )
                cached = space.table_pack = _repack(cached, tables, (), _TABLE_DTYPES)
            table_packed = cached[1]
            cached = space.parser_pack
            if cached is None or cached[0] is not parser_arrays:
                cached = space.parser_pack = _repack(cached, parser_arrays, _PARSER_SCALARS, _PARSER_DTYPES)
            parser_packed = cached[1]
            cached = space.scan_pack
            if cached is None or cached[0] is not scan_arrays:
                cached = space.scan_pack = _repack(cached, scan_arrays, _SCAN_SCALARS, _SCAN_DTYPES)
            scan_packed = cached[1]
            cached = space.lex_pack
            if cached is None or cached[0] is not lex_arrays:
                cached = space.lex_pack = _repack(cached, lex_arrays, (), _LEX_DTYPES)
        except ValueError:
            self._packing = False  # arrays of other types: pass them one by one from now on
            return None
        groups = (trie_packed, table_packed, parser_packed, scan_packed, cached[1])
        old = space.book_groups
        if len(old) != 5 or any(a is not b for a, b in zip(old, groups, strict=False)):
            # Calling compiled code costs about 0.15 µs per array argument; one book
            # instead of five groups spares most of that on every walk. The space keeps
            # the groups alive (the attributes above) for as long as the book is used.
            space.book_groups = groups
            space.book = pack(groups, _BOOK_DTYPES)
        space.book_sources = (
            trie,
            parser_arrays,
            scan_arrays,
            lex_arrays,
            lexer.table,
            lexer.accept,
            rec.row_lexstate,
            rec.step_keys,
            rec.step_vals,
            space.frontier,
            lexer.narrow,
            lexer.counted,
            lexer.char_next,
            lexer.floor,
        )
        return space.book

    def _run(
        self,
        trie: TokenTrie,
        state,
        ranges: np.ndarray,
        base_depth: int,
        stop_at_first: bool,
        mask: np.ndarray,
        record_frontier: bool = False,
    ) -> bool:
        rec = self.rec
        space = self.space
        space.stack_lex[base_depth] = state[0]
        space.stack_row[base_depth] = state[1]
        space.frontier_count[0] = 0
        range_idx, node = 0, int(ranges[0, 0])
        base_row = int(state[1])
        while True:
            lexer = rec.lexer
            parser_arrays = rec.parser.walk_arrays(self.limits_items, self.limits_fuel)
            scan_arrays = rec.scan_arrays()
            lex_arrays = lexer.step_arrays()
            book = self._packed(trie, lexer, parser_arrays, scan_arrays, lex_arrays) if self._packing else None
            if book is not None:
                args: tuple = (book, ranges, range_idx, node, stop_at_first, mask, base_row, record_frontier)
                walk = self._walk_packed
                if walk is None:
                    walk = self._walk_packed = compiled_once(walk_packed_jit, args)
            else:
                args = (
                    trie.node_records,
                    trie.tok_start,
                    trie.tok_end,
                    trie.node_tokens,
                    trie.deepest_below,
                    lexer.table,
                    lexer.accept,
                    lexer.narrow,
                    lexer.counted,
                    lexer.floor,
                    lexer.char_next,
                    rec.row_lexstate,
                    rec.step_keys,
                    rec.step_vals,
                    space.stack_lex,
                    space.stack_row,
                    ranges,
                    range_idx,
                    node,
                    stop_at_first,
                    mask,
                    space.stats,
                    base_row,
                    space.frontier,
                    space.frontier_count,
                    record_frontier,
                    parser_arrays,
                    scan_arrays,
                    lex_arrays,
                )
                walk = self.walk
                if walk is None:
                    walk = self.walk = compiled_for(self._walk_fn, args)
            status, range_idx, node, a, b = walk(*args)
            if status == DONE:
                return bool(a)
            if status == NEED_LEXER:
                # Only the missing derivatives: the walk's compiled step does the rest
                # when it resumes (and Python all of it where that step cannot).
                if self._narrowed_here(trie, node, int(a)):
                    continue  # the walk steps from the twin instead
                if not lexer.publish(int(a), int(b)):
                    lexer.step(int(a), int(b))
            elif status == NEED_EXIT:
                self._count_exit(int(a), int(b))
            elif status == NEED_SPACE:
                grown = np.zeros((2 * space.frontier.shape[0], 3), dtype=np.int64)
                grown[: space.frontier.shape[0]] = space.frontier
                space.frontier = grown
            else:
                # The compiled scan gave up. Most often an array it writes was full:
                # grown here, the walk builds the step itself when it resumes.
                if not rec.make_room_for_step():
                    rec.scan_in_python(int(a), int(b))

    def mask(self, state) -> np.ndarray:
        """Bitmask of trie tokens allowed from recognizer state `state` (EOS not included).
        Read-only: it may be the mask cache's own array, shared with every later caller
        that meets the state (copy it to change it). A hit is then a lookup; a copy of a
        128k vocabulary's mask from a cache of thousands costs more than the lookup."""
        key = self._state_key(state)
        hit = None if self.cache is None else self.cache.get(key)
        if hit is None:
            mask, sliced = self._compute(state)
            mask.flags.writeable = False
            if self.cache is not None:
                self.cache.put(key, mask, sliced)
        else:
            mask, sliced = hit
        self.last_sliced = sliced
        self.last_mask = (key, mask, state)
        self.last_parted = state if sliced and self._slices_part() else None
        return mask

    @property
    def split_at_lexeme(self) -> bool:
        return self._split_at_lexeme

    @split_at_lexeme.setter
    def split_at_lexeme(self, value: bool) -> None:
        # Another walk variant: its masks are kept apart from the other variant's (a test
        # turns the split off after construction and compares the two).
        self._split_at_lexeme = value
        self._number_variant()

    def _number_variant(self) -> None:
        """Numbers the recognizer, trie and walk variant in the mask cache's keys, so that
        variants stay apart (tests comparing them compare walks) and a state's key is one
        int, which the collector does not track, where a tuple was made at every mask."""
        variant = (self._use_jit, None if self.sliced is None else self.sliced.regexes, self._split_at_lexeme)
        cache_id = self.space.cache_ids.get(variant)
        if cache_id is None:
            cache_id = self.space.cache_ids[variant] = next(_cache_ids)
        self._cache_id = cache_id << 64
        self._prefix_key = (cache_id, "inside lexeme")

    def _state_key(self, state) -> int:
        # Lexer states and rows are int32 table indexes.
        return self._cache_id | (int(state[0]) << 32) | int(state[1])

    def two_bytes_allowed(self, state) -> bool:
        """True when the mask last asked for is `state`'s and allows tokens that start
        with two different bytes: then nothing is forced. False means "not known". The
        fast-forward call that follows a mask at the same state (the decoding loop's
        order) is answered without a look at the lexer or the parser."""
        return self.tokens_part_within(state, 1)

    def tokens_part_within(self, state, depth: int) -> bool:
        """True when the mask last asked for is `state`'s and two of its tokens differ at
        one of their first `depth` bytes (at most HEAD_BYTES are looked at). Every
        allowed token goes on through the forced bytes, so then fewer than `depth` bytes
        are forced, and a token spans them and more. False means "not known"."""
        if self.last_parted is state:
            return True
        last = self.last_mask
        if last is None or (last[2] is not state and last[0] != self._state_key(state)):
            return False
        key = last[0]
        partings = self.space.partings
        known = partings.get(key)
        if known is not None:
            if depth >= known[1]:
                return True
            if depth <= known[0]:
                return False
        part = self._tokens_part
        if part is None:
            heads, lengths = self.trie.token_heads
            # Every mask handed out is read-only, so the types stay those of the first call.
            fn = compiled_for(self._tokens_part_fn, (last[1], heads, lengths, depth))
            part = self._tokens_part = (fn, heads, lengths)
        fn, heads, lengths = part
        parted = bool(fn(last[1], heads, lengths, depth))
        below, above = known if known is not None else (0, _NEVER_PARTS)
        if len(partings) >= _MAX_PARTINGS_KEPT:
            partings.clear()
        partings[key] = (below, depth) if parted else (depth, above)
        return parted

    def _slices_part(self) -> bool:
        """Whether every slice's tokens start with two different bytes (a string body's
        do): then so do a sliced mask's, as it holds a whole slice."""
        got = self._slices_part_known
        if got is None:
            heads, lengths = self.trie.token_heads
            got = self.sliced is not None and all(
                tokens_part_within_py(slice_mask, heads, lengths, 1) for slice_mask in self.sliced.masks
            )
            self._slices_part_known = got
        return got

    def step_child(self, row: int, lexset: int) -> int:
        """The recognizer's step from `row` after lexeme set `lexset`, built where missing
        in compiled code with the walk's packed arrays (Recognizer.scan_missing asks it
        first: a step built in Python cost about as much as a whole fast-forward call),
        or SCAN_IN_PYTHON where Python must build it."""
        if not self._packing:
            return SCAN_IN_PYTHON
        rec = self.rec
        lexer = rec.lexer
        parser_arrays = rec.parser.walk_arrays(self.limits_items, self.limits_fuel)
        book = self._packed(self.trie, lexer, parser_arrays, rec.scan_arrays(), lexer.step_arrays())
        if book is None:
            return SCAN_IN_PYTHON
        fn = self._step_child
        if fn is None:
            fn = self._step_child = compiled_once(step_child_packed_jit, (book, row, lexset))
        return fn(book, row, lexset)

    def heal_point(self, trie: TokenTrie, end_state, forced: bytes, start: int) -> tuple[int, bool] | None:
        """`heal_point_packed` for the state `end_state` after `forced`: (index, whether
        Python must decide that index). None where this walker passes no packed arrays
        or walks another trie."""
        if not self._packing or trie is not self.trie:
            return None
        rec = self.rec
        lexer = rec.lexer
        parser_arrays = rec.parser.walk_arrays(self.limits_items, self.limits_fuel)
        book = self._packed(trie, lexer, parser_arrays, rec.scan_arrays(), lexer.step_arrays())
        if book is None:
            return None
        scratch = self._heal_scratch
        if scratch is None:
            scratch = self._heal_scratch = (
                np.zeros(mask_words(trie.vocab_size), dtype=np.uint32),
                np.zeros((1, 3), dtype=np.int64),
            )
        args = (
            book,
            np.frombuffer(forced, dtype=np.uint8),
            start,
            int(end_state[0]),
            int(end_state[1]),
            trie.node_byte,
            trie.subtree_size,
            trie.root_children(),
            scratch[0],
            scratch[1],
        )
        fn = self._heal_point
        if fn is None:
            fn = self._heal_point = compiled_once(heal_point_packed_jit, args)
        idx, in_python = fn(*args)
        return int(idx), bool(in_python)

    def _compute(self, state) -> tuple[np.ndarray, bool]:
        # The fuel limits bound the work of one mask (limits.py); a grammar serving a
        # long session must not run out of them.
        self.rec.lexer.fuel_used = 0
        self.rec.parser.counts[STEPS_USED] = 0
        if self._packing:
            scanner = self.rec.caches.scanner
            if scanner is None or scanner() is None:
                self.rec.caches.scanner = weakref.ref(self)  # the walker that set it is gone
        return self._compute_split(state)

    def _compute_split(self, state) -> tuple[np.ndarray, bool]:
        """The mask in two parts. What lies inside the current lexeme depends on the lexer
        state alone and is kept per lexer state (in the mask cache), with its frontier:
        the nodes where a lexeme ends and the row decides. A state met again with
        another row (the next string value, the next array element) walks only the
        frontier: inside a JSON string, a few hundred nodes instead of thousands. The
        first visit of a lexer state walks whole (`_first_visit`)."""
        lexstate = int(state[0])
        applicable: tuple[bool, ...] = ()
        if self.sliced is not None:
            applicable = applicable_slices(self.rec, self.sliced, lexstate)
        if not self._split_at_lexeme:
            return self._whole_walk(state, applicable), any(applicable)
        inside = None
        rep = self._representative(lexstate)
        if self.cache is not None:
            inside_key = self._prefix_key + (rep, applicable)
            hit = self.cache.get(inside_key)
            if hit is not None:
                inside, frontier = hit
            elif self.whole_walk_first_visit and self._first_visit(rep, applicable):
                return self._whole_walk((rep, state[1]), applicable), any(applicable)
        if inside is None:
            inside, frontier = self._inside_lexeme(rep, applicable)
            if self.cache is not None:
                self.cache.put(inside_key, inside, frontier, extra_bytes=frontier.nbytes)
        if not frontier.shape[0]:
            # Nothing past the lexeme: the mask is the inside one (read-only, shared).
            return inside, any(applicable)
        mask = inside.copy()
        trie = self.sliced.forest if any(applicable) else self.trie
        self._run(trie, state, frontier, 0, False, mask)
        return mask, any(applicable)

    def _first_visit(self, rep: int, applicable: tuple[bool, ...]) -> bool:
        """True the first time the inside walk of `rep` (with these slices) is wanted.
        Most lexer states are met with one row only: a position inside one key, one
        number, one string of a kind met once. For them the split costs a second
        compiled call, the frontier's recording and a copy of the inside mask, and its
        inside part is never used again; one whole walk gives the same mask. The inside
        walk waits for a second visit, with another row (`bench ab` on the dev set:
        TBM p90 -5.4 to -8.0 %, p99 unchanged)."""
        seen = self.space.seen_inside
        key = (rep, applicable)
        if key in seen:
            return False
        if len(seen) >= _MAX_SEEN_INSIDE:
            # Forgetting costs a revisited state one more whole walk, nothing else.
            seen.clear()
        seen.add(key)
        return True

    def _representative(self, lexstate: int) -> int:
        """The lexer state of `lexstate`'s expressions clamped (`ExprSet.clamped`, at the
        trie's depth and by the whole repetitions its tokens hold, `RepeatBounds`): both
        allow the same tokens inside the lexeme, with the same frontier nodes, and the
        frontier's own lexer states accept the same lexemes, so a walk from either gives
        the same mask. Each position of a string with a long `maxLength` is a lexer state
        of its own (the count left), and all of them but the last `depth` share one
        inside walk; so do the counts of a word-count limit (`(?:\\S+\\s+){0,99}`) above
        the most words one token spells (a few), and of any bounded repetition of a
        group at least two bytes long."""
        space = self.space
        rep = space.representative.get(lexstate)
        if rep is None:
            lexer = self.rec.lexer
            exprs = lexer.exprs
            depth = self.trie.max_depth
            bounds = space.repeat_bounds
            assert bounds is not None  # set when the walker was made
            pairs = lexer.states[lexstate]
            content = pairs
            if exprs.has_count_above(pairs, min(depth, bounds.floor)):
                clamped = exprs.clamped
                content = tuple([(i, clamped(e, depth, bounds)) for i, e in pairs])
            if content != pairs:
                rep = space.by_clamped.get(content)
                if rep is None:
                    # The clamped expressions' own state, not the first state met: a
                    # walk from `C{0,6000}"` goes down a run of spaces through a new
                    # state per byte (the count left, each a derivative made in Python
                    # at a return from the compiled walk), one from `C*"` stays in one.
                    rep = space.by_clamped[content] = lexer.intern_state(content)
                self.rec.caches.walk_twins[lexstate] = rep
            else:
                # Nothing to clamp (nearly every state): the state stands for itself.
                rep = lexstate
            space.representative[lexstate] = rep
        return rep

    def _narrowed_here(self, trie: TokenTrie, node: int, lexstate: int) -> bool:
        """At a return for a derivative `lexstate` lacks at `node`: whether the walk,
        now that `lexstate`'s narrower twin is worked out (Lexer.narrowing), goes on
        from the twin at `node` (whose tokens are short enough for it) and so needs
        no derivative of `lexstate`, or counts characters from the twin (tokens too
        long for it, a limit it counts: Lexer.count_entry). A state at the start of a
        lexeme after another ended is not the parent's state on the stack, and the walk
        does not narrow it."""
        depth = int(trie.node_depth[node])
        if depth < 1 or int(self.space.stack_lex[depth - 1]) != lexstate:
            return False
        lexer = self.rec.lexer
        narrow = lexer.narrowing(lexstate)
        if narrow == NO_NARROWING:
            return False
        if int(trie.deepest_below[node]) - depth + 1 <= narrow & NARROW_BYTES_MASK:
            return True
        # Tokens too long for the twin: the walk counts characters from it, if it may.
        return lexer.count_entry(lexstate)

    def _count_exit(self, lexstate: int, depth: int) -> None:
        """Works out where a counted walk goes on from `lexstate` at `depth` once no
        character is left (Lexer.count_exit), for the count that began at the deepest
        state on the stack above it that is not a counted walk's."""
        stack = self.space.stack_lex
        at = depth - 1
        while int(stack[at]) > STACK_STATE_MASK:
            at -= 1
        self.rec.lexer.count_exit(lexstate, int(stack[at]))

    def _inside_lexeme(self, lexstate: int, applicable: tuple[bool, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(tokens allowed without leaving the lexeme, frontier ranges) from `lexstate`."""
        trie, ranges, mask = self._walk_plan(applicable)
        if ranges.shape[0] == 0:
            return mask, np.zeros((0, 3), dtype=np.int64)
        # The row plays no part inside a lexeme: any row will do for the stacks.
        self._run(trie, (lexstate, 0), ranges, 0, False, mask, record_frontier=True)
        space = self.space
        return mask, space.frontier[: int(space.frontier_count[0])].copy()

    def _whole_walk(self, state, applicable: tuple[bool, ...]) -> np.ndarray:
        """The mask in one walk, lexeme boundaries and all (split_at_lexeme=False)."""
        trie, ranges, mask = self._walk_plan(applicable)
        if ranges.shape[0]:
            self._run(trie, state, ranges, 0, False, mask)
        return mask

    def _walk_plan(self, applicable: tuple[bool, ...]) -> tuple[TokenTrie, np.ndarray, np.ndarray]:
        """(trie, node ranges to walk, mask of the slices allowed whole)."""
        ranges: np.ndarray | None
        if not any(applicable):
            # Slice tries repeat the prefixes they share (every trie has its own '"',
            # ' ', ...), so with no slice to skip the whole trie is the shorter walk.
            trie, ranges = self.trie, self._full_range
            mask = np.zeros(mask_words(self.trie.vocab_size), dtype=np.uint32)
        else:
            trie = self.sliced.forest
            ranges = self._range_cache.get(applicable)
            if ranges is None:
                two = self.sliced.ranges_to_walk(applicable)
                ranges = np.concatenate([two, np.full((two.shape[0], 1), -1, dtype=np.int64)], axis=1)
                self._range_cache[applicable] = ranges
            mask = self.sliced.mask_of(applicable)
        return trie, ranges, mask

    def any_extension(self, state, node: int) -> bool:
        """Whether some token strictly below trie node `node` is allowed, when `state` is
        the recognizer state after reading the bytes that spell `node`."""
        scratch = np.zeros(mask_words(self.trie.vocab_size), dtype=np.uint32)
        return self._run(self.trie, state, self._subtree_range(node), int(self.trie.node_depth[node]), True, scratch)

    def subtree_mask(self, state, node: int) -> np.ndarray:
        """Tokens strictly below trie node `node` allowed from `state` (the state after
        the bytes that spell `node`), unsliced."""
        mask = np.zeros(mask_words(self.trie.vocab_size), dtype=np.uint32)
        if self.trie.subtree_size[node] > 1:
            self._run(self.trie, state, self._subtree_range(node), int(self.trie.node_depth[node]), False, mask)
        return mask

    def _subtree_range(self, node: int) -> np.ndarray:
        return np.array([[node + 1, node + int(self.trie.subtree_size[node]), -1]], dtype=np.int64)


def reference_mask(rec: Recognizer, state, token_bytes: list[bytes], excluded, tokens=None) -> np.ndarray:
    """The definition of the mask: token t is allowed iff its bytes all pass `rec.step`.

    `tokens` restricts the check to a sample of ids (others stay 0)."""
    mask = np.zeros(mask_words(len(token_bytes)), dtype=np.uint32)
    ids = range(len(token_bytes)) if tokens is None else tokens
    for t in ids:
        data = token_bytes[t]
        if not data or t in excluded:
            continue
        if rec.step_bytes(state, data) is not None:
            mask[t >> 5] |= np.uint32(1 << (t & 31))
    return mask
