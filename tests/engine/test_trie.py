"""The flat token trie: layout, queries, disk cache, and the numba walk against its twin."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.trie import (
    RECORD_DEPTH_MASK,
    RECORD_DEPTH_SHIFT,
    RECORD_SEVERAL,
    RECORD_SUBTREE_MASK,
    RECORD_SUBTREE_SHIFT,
    RECORD_TOKEN_MASK,
    RECORD_TOKEN_SHIFT,
    TokenTrie,
    fill_deepest_below_py,
    fill_subtree_sizes_py,
    mask_words,
    node_for_jit,
    node_for_py,
    walk_table_jit,
    walk_table_py,
)

vocab_strategy = st.lists(
    st.binary(min_size=0, max_size=6).map(lambda b: bytes(x % 4 + 97 for x in b)), min_size=1, max_size=120
)


def brute_walk(token_bytes, excluded, table, start, accepting):
    allowed = set()
    for t, data in enumerate(token_bytes):
        if not data or t in excluded:
            continue
        s = start
        for b in data:
            s = table[s, b]
            if s < 0:
                break
        else:
            if accepting[s]:
                allowed.add(t)
    return allowed


def mask_set(mask, n):
    return {t for t in range(n) if mask[t >> 5] >> (t & 31) & 1}


@settings(max_examples=150, deadline=None)
@given(vocab_strategy, st.sets(st.integers(0, 119)))
def test_layout_and_queries_match_brute_force(token_bytes, excluded):
    trie = TokenTrie.build(token_bytes, excluded, fingerprint="test")
    live = {t for t, b in enumerate(token_bytes) if b and t not in excluded}
    assert sorted(trie.node_tokens.tolist()) == sorted(live)
    # one node per distinct non-empty prefix
    prefixes = {token_bytes[t][:k] for t in live for k in range(1, len(token_bytes[t]) + 1)}
    assert trie.num_nodes == len(prefixes) + 1
    # the next sibling of every node is where the subtree ends
    for i in range(1, trie.num_nodes):
        j = i + trie.subtree_size[i]
        assert j == trie.num_nodes or trie.node_depth[j] <= trie.node_depth[i]
        assert all(trie.node_depth[k] > trie.node_depth[i] for k in range(i + 1, j))
    for t in live:
        assert trie.token_node[t] >= 0
    for probe in [b"", b"a", b"ab", b"bca", b"dddd", b"abcdab"]:
        expect = {t for t in live if token_bytes[t].startswith(probe)}
        assert set(trie.tokens_with_prefix(probe)) == expect
        expect_prefix = {(len(token_bytes[t]), t) for t in live if probe.startswith(token_bytes[t])}
        assert set(trie.tokens_prefix_of(probe)) == expect_prefix
        assert trie.has_extension(probe) == any(
            len(token_bytes[t]) > len(probe) and token_bytes[t].startswith(probe) for t in live
        )


@settings(max_examples=150, deadline=None)
@given(vocab_strategy, st.integers(1, 5), st.data())
def test_walk_jit_equals_twin_and_brute_force(token_bytes, n_states, data):
    trie = TokenTrie.build(token_bytes, fingerprint="test")
    table = np.full((n_states, 256), -1, dtype=np.int32)
    for s in range(n_states):
        for b in b"abcd":
            table[s, b] = data.draw(st.integers(-1, n_states - 1))
    start = data.draw(st.integers(0, n_states - 1))
    accepting = np.array([data.draw(st.booleans()) for _ in range(n_states)], dtype=np.bool_)
    args = (
        trie.node_byte,
        trie.node_depth,
        trie.subtree_size,
        trie.tok_start,
        trie.tok_end,
        trie.node_tokens,
        table,
        accepting,
        start,
    )
    m_jit = np.zeros(mask_words(len(token_bytes)), dtype=np.uint32)
    m_py = np.zeros_like(m_jit)
    v_jit = walk_table_jit(*args, m_jit)
    v_py = walk_table_py(*args, m_py)
    assert v_jit == v_py
    assert np.array_equal(m_jit, m_py)
    assert mask_set(m_jit, len(token_bytes)) == brute_walk(token_bytes, set(), table, start, accepting)


@settings(max_examples=150, deadline=None)
@given(
    vocab_strategy, st.lists(st.binary(min_size=1, max_size=7).map(lambda b: bytes(x % 5 + 97 for x in b)), max_size=12)
)
def test_node_for_jit_equals_twin_and_spelled_prefixes(token_bytes, probes):
    trie = TokenTrie.build(token_bytes, fingerprint="test")
    live = [b for b in token_bytes if b]
    for probe in probes + [b[:k] for b in live[:8] for k in range(1, len(b) + 1)]:
        data = np.frombuffer(probe, dtype=np.uint8)
        args = (trie.node_byte, trie.subtree_size, trie.root_children(), data)
        node = trie.node_for(probe)
        assert node == node_for_jit(*args) == node_for_py(*args)
        if any(b.startswith(probe) for b in live):
            # The node spells the probe: its depth and the bytes on its path.
            assert node > 0 and trie.node_depth[node] == len(probe)
            assert set(trie.tokens_with_prefix(probe)) == {
                t for t, b in enumerate(token_bytes) if b and b.startswith(probe)
            }
            assert trie.child(trie.node_for(probe[:-1]), probe[-1]) == node
        else:
            assert node == -1
    assert trie.node_for(b"") == 0


def test_subtree_sizes_twin():
    depth = np.array([0, 1, 2, 2, 1, 2, 3, 1], dtype=np.int32)
    out = np.empty_like(depth)
    fill_subtree_sizes_py(depth, out)
    assert out.tolist() == [8, 3, 1, 1, 3, 2, 1, 1]


@settings(max_examples=100, deadline=None)
@given(vocab_strategy)
def test_deepest_below_is_the_deepest_node_of_each_subtree(token_bytes):
    trie = TokenTrie.build(token_bytes, fingerprint="test")
    got = trie.deepest_below
    for node in range(trie.num_nodes):
        end = node + int(trie.subtree_size[node])
        assert got[node] == trie.node_depth[node:end].max(), node
    plain, scratch = np.zeros_like(got), np.zeros_like(got)
    fill_deepest_below_py(trie.node_depth, trie.subtree_size, plain, scratch)
    assert np.array_equal(plain, got)


def test_duplicate_token_bytes_share_a_node():
    trie = TokenTrie.build([b"ab", b"a", b"ab", b""], fingerprint="dup")
    node = trie.node_for(b"ab")
    assert sorted(trie.node_tokens[trie.tok_start[node] : trie.tok_end[node]].tolist()) == [0, 2]
    mask, _ = trie.walk_table(np.zeros((1, 256), dtype=np.int32), 0)
    assert mask_set(mask, 4) == {0, 1, 2}


def test_disk_cache_roundtrip(tmp_path):
    token_bytes = [b"user", b"userName", b"userId", b"Na", b"N"]
    trie = TokenTrie.build(token_bytes, fingerprint="fp")
    trie.save(tmp_path / "t.npz")
    again = TokenTrie.load(tmp_path / "t.npz", "fp")
    for name in ["node_byte", "node_depth", "subtree_size", "tok_start", "tok_end", "node_tokens", "token_node"]:
        assert np.array_equal(getattr(trie, name), getattr(again, name))
    assert again.tokens_with_prefix(b"user") == trie.tokens_with_prefix(b"user")


def test_llama3_trie_queries(llama3, tmp_path):
    trie = TokenTrie.for_tokenizer(llama3, cache_dir=tmp_path)
    assert 1.5 < trie.num_nodes / len(trie.node_tokens) < 3.5
    user = set(trie.tokens_with_prefix(b"userN"))
    spelled = {llama3.token_bytes(t) for t in user}
    assert b"userName" in spelled and all(s.startswith(b"userN") for s in spelled)
    prefixes = {llama3.token_bytes(t) for _, t in trie.tokens_prefix_of(b"userNa")}
    assert {b"u", b"us", b"user"} <= prefixes
    # special tokens stay out of the trie
    for t in llama3.special_token_ids:
        assert trie.token_node[t] == -1
    # a second process (here: a second load) reads the cache instead of rebuilding
    cached = TokenTrie.for_tokenizer(llama3, cache_dir=tmp_path)
    assert np.array_equal(cached.node_byte, trie.node_byte)
    assert list((tmp_path / "tries").iterdir())


def test_llama3_full_walk_allows_every_token(llama3):
    trie = TokenTrie.for_tokenizer(llama3)
    mask, visited = trie.walk_table(np.zeros((1, 256), dtype=np.int32), 0)
    assert visited == trie.num_nodes - 1
    assert mask_set(mask, llama3.vocab_size) == set(trie.node_tokens.tolist())


@settings(max_examples=100, deadline=None)
@given(vocab_strategy, st.sets(st.integers(0, 119)))
def test_node_records_hold_each_nodes_byte_depth_subtree_and_token(token_bytes, excluded):
    trie = TokenTrie.build(token_bytes, excluded, fingerprint="test")
    records = trie.node_records
    assert records.dtype == np.int64 and (records >= 0).all()
    assert np.array_equal(records & 0xFF, trie.node_byte)
    assert np.array_equal((records >> RECORD_DEPTH_SHIFT) & RECORD_DEPTH_MASK, trie.node_depth)
    assert np.array_equal((records >> RECORD_SUBTREE_SHIFT) & RECORD_SUBTREE_MASK, trie.subtree_size)
    for node in range(trie.num_nodes):
        token = int(records[node] >> RECORD_TOKEN_SHIFT) & RECORD_TOKEN_MASK
        ending = trie.tokens_at(node)
        # Duplicate byte strings (two ids, one node) take the slow path through tok_start.
        assert token == (0 if not ending else ending[0] + 1 if len(ending) == 1 else RECORD_SEVERAL)
    assert trie.node_records is records  # made once


def test_node_records_send_ids_too_large_for_the_field_through_tok_start():
    big = RECORD_SEVERAL + 5
    token_bytes = [b""] * big + [b"ab", b"a"]
    trie = TokenTrie.build(token_bytes, fingerprint="test", only=[big, big + 1])
    tokens = (trie.node_records >> RECORD_TOKEN_SHIFT) & RECORD_TOKEN_MASK
    assert sorted(tokens.tolist()) == [0, RECORD_SEVERAL, RECORD_SEVERAL]


def test_node_records_refuse_a_token_too_long_for_the_depth_field():
    trie = TokenTrie.build([b"x" * (RECORD_DEPTH_MASK + 1), b"y"], fingerprint="test")
    with pytest.raises(ValueError, match="at most 1023 bytes"):
        _ = trie.node_records


@settings(max_examples=50, deadline=None)
@given(token_bytes=st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=40, unique=True), data=st.data())
def test_extendable_suffixes_jit_equals_twin_and_brute_force(token_bytes, data):
    from midword.engine.trie import extendable_suffixes_jit, extendable_suffixes_py

    trie = TokenTrie.build(token_bytes)
    text = data.draw(st.binary(min_size=0, max_size=8))
    start = data.draw(st.integers(0, len(text)))
    want = [
        (idx, trie.node_for(text[idx:]))
        for idx in range(start, len(text))
        if any(len(t) > len(text) - idx and t.startswith(text[idx:]) for t in token_bytes)
    ]
    assert trie.extendable_suffixes(text, start) == want
    out = np.empty((2, max(1, len(text))), dtype=np.int64)
    args = (trie.node_byte, trie.subtree_size, trie.root_children(), np.frombuffer(text, dtype=np.uint8), start)
    n = extendable_suffixes_py(*args, out[0], out[1])
    assert list(zip(out[0][:n].tolist(), out[1][:n].tolist(), strict=True)) == want
    n = extendable_suffixes_jit(*args, out[0], out[1])
    assert list(zip(out[0][:n].tolist(), out[1][:n].tolist(), strict=True)) == want


def test_token_heads_spell_each_tokens_first_bytes(llama3):
    from midword.engine.matcher import trie_for
    from midword.engine.trie import HEAD_BYTES

    trie = trie_for(llama3)
    heads, lengths = trie.token_heads
    assert heads.shape == (llama3.vocab_size, HEAD_BYTES) and lengths.shape == (llama3.vocab_size,)
    special = set(llama3.special_token_ids)
    for t in range(llama3.vocab_size):
        if t in special:
            assert lengths[t] == 0, t  # outside the trie: no head
            continue
        spelled = llama3.token_bytes(t)[:HEAD_BYTES]
        assert lengths[t] == len(spelled) and bytes(heads[t, : lengths[t]]) == spelled, t
    small = TokenTrie.build([b"ab", b"a", b"abcdefghijk", b"c", b"ab"])
    heads, lengths = small.token_heads
    assert lengths.tolist() == [2, 1, HEAD_BYTES, 1, 2]
    assert bytes(heads[2]) == b"abcdefghijk"[:HEAD_BYTES] and bytes(heads[4, :2]) == b"ab"
