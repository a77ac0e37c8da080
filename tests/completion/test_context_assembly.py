"""Workspace context in the prompt (completion/context.py): ranking, deduplication, the
token budget, and the layout per model family without FIM (comment headers)."""

from __future__ import annotations

import pytest

from midword.completion.context import (
    assemble,
    comment_for,
    count_tokens,
    rank,
    select,
)
from midword.completion.types import CompletionRequest, ContextChunk

UTIL = '''"""Widget helpers."""

import os


def frobnicate_widget_count(widget_registry, *, include_hidden=False):
    """How many widgets the registry holds."""
    return sum(1 for w in widget_registry if include_hidden or not w.hidden)


def unrelated_banana_peeler(peel):
    peel.strip()
    return peel
'''

PREFIX = "import util\n\n\ndef report(widget_registry):\n    n = util.frob"


def _text(tok, tokens):
    return tok.decode(tokens).decode("utf-8")


def test_chunk_checks_its_fields():
    with pytest.raises(ValueError, match="kind"):
        ContextChunk("x", kind="file")
    with pytest.raises(TypeError, match="text"):
        ContextChunk(b"x")
    with pytest.raises(TypeError, match="time"):
        ContextChunk("x", time="yesterday")
    assert CompletionRequest(prefix="").context == ()


def test_without_context_the_prompt_is_plain(gemma3):
    toks = gemma3.encode(PREFIX)
    p = assemble(gemma3, toks, prefix=PREFIX, chunks=(), budget=1024)
    assert p.tokens == [gemma3.bos_token_id] + toks
    assert p.tail == toks and p.context_tokens == 0


def test_comment_headers_context_first_then_the_document(gemma3):
    toks = gemma3.encode(PREFIX)
    chunks = (ContextChunk(UTIL, path="pkg/util.py", kind="document"),)
    p = assemble(gemma3, toks, prefix=PREFIX, chunks=chunks, budget=1024, path="pkg/report.py", language="python")
    assert p.tokens[0] == gemma3.bos_token_id
    assert p.tokens[-len(toks) :] == toks and p.tail == toks
    text = _text(gemma3, p.tokens[1:])
    assert text.startswith("# pkg/util.py\n")
    assert "def frobnicate_widget_count(widget_registry" in text
    assert text.index("frobnicate_widget_count") < text.index("# pkg/report.py\n") < text.index(PREFIX)
    # the piece that shares no name with the text around the cursor stays out
    assert "banana" not in text
    assert p.context_tokens == len(p.tokens) - 1 - len(toks)


def test_comment_marker_follows_the_language():
    assert comment_for("python", None) == "#"
    assert comment_for(None, "src/app.ts") == "//"
    assert comment_for("lua", None) == "--"
    assert comment_for(None, "lib/x.rb") == "#"


def test_definitions_of_names_near_the_cursor_rank_first():
    other = ContextChunk("def frobnicate_widget_count(registry):\n    return 0\n", path="a.py", kind="snippet")
    mention = ContextChunk("x = widget_registry.frob\nwidget_registry.clear()\n", path="b.py", kind="snippet")
    ranked = rank([mention, other], PREFIX + "nicate_widget_count(widget_registry)\n", "")
    assert [p.path for p in ranked] == ["a.py", "b.py"]


def test_recency_breaks_ties():
    a = ContextChunk("def alpha_helper(widget_registry):\n    return 1\n", path="a.py", time=10.0)
    b = ContextChunk("def alpha_helper(widget_registry):\n    return 2\n", path="b.py", time=20.0)
    prefix = "def report(widget_registry):\n    alpha_helper(widget_registry)\n    n = "
    assert [p.path for p in rank([a, b], prefix, "")] == ["b.py", "a.py"]
    b_old = ContextChunk(b.text, path="b.py", time=5.0)
    assert [p.path for p in rank([a, b_old], prefix, "")] == ["a.py", "b.py"]


def test_duplicates_are_dropped(gemma3):
    snippet = "def frobnicate_widget_count(widget_registry):\n    return len(widget_registry.items)\n"
    chunks = (
        ContextChunk(snippet, path="a.py"),
        ContextChunk(snippet, path="b.py"),
        ContextChunk("  " + snippet.replace("\n", "  \n"), path="c.py"),
    )
    pieces, _ = select(gemma3, chunks, prefix=PREFIX, budget=1024)
    assert [p.path for p in pieces] == ["a.py"]
    # a chunk that repeats the document around the cursor adds nothing
    doc = "def report(widget_registry):\n    total = frobnicate_widget_count(widget_registry)\n    return total\n"
    pieces, _ = select(gemma3, (ContextChunk(doc, path="copy.py"),), prefix=doc + "\nx = frob", budget=1024)
    assert pieces == []


def test_the_document_itself_is_not_context(gemma3):
    chunks = (ContextChunk(UTIL, path="pkg/util.py", kind="document"),)
    pieces, _ = select(gemma3, chunks, prefix="frobnicate_widget_count(", budget=1024, path="pkg/util.py")
    assert pieces == []


def test_budget_is_kept_and_the_last_piece_cut_to_its_head(gemma3):
    body = "".join(f"    widget_registry.step_{i}(value_{i})\n" for i in range(60))
    big = f"def frobnicate_widget_count(widget_registry):\n{body}"
    chunks = (ContextChunk(big, path="big.py", kind="snippet"),)
    for budget in (40, 100, 300):
        pieces, tokens = select(gemma3, chunks, prefix=PREFIX, budget=budget)
        assert 0 < len(tokens) <= budget
        assert pieces[0].text.startswith("def frobnicate_widget_count(widget_registry):\n")
        assert pieces[0].text.count("\n") < big.count("\n")
    pieces, tokens = select(gemma3, chunks, prefix=PREFIX, budget=10)  # too small for any piece
    assert pieces == [] and tokens == []
    docs = tuple(
        ContextChunk(UTIL.replace("frobnicate", f"frobnicate{i}"), path=f"m{i}.py", kind="document") for i in range(20)
    )
    p = assemble(gemma3, gemma3.encode(PREFIX), prefix=PREFIX, chunks=docs, budget=200, path="r.py")
    ctx = p.context_tokens - count_tokens(gemma3, "# r.py\n")
    assert 0 < ctx <= 200


def test_documents_are_ranked_piece_by_piece(gemma3):
    filler = "".join(f"def filler_{i}(a):\n    return a * {i}\n\n\n" for i in range(40))
    doc = filler + UTIL
    pieces, _ = select(gemma3, (ContextChunk(doc, path="u.py", kind="document"),), prefix=PREFIX, budget=120)
    assert any("def frobnicate_widget_count" in p.text for p in pieces)
    assert not any("filler_" in p.text for p in pieces)


def test_context_is_stable_across_keystrokes_and_new_chunks_go_last(gemma3):
    """The KV cache survives typing: the context does not move while the user types at
    the cursor, and a newer chunk leaves the older chunks' tokens where they were."""
    old = ContextChunk(UTIL, path="pkg/util.py", time=1.0, kind="document")
    edit = ContextChunk("def frobnicate_all(widget_registry):\n    pass\n", path="pkg/more.py", time=2.0, kind="edit")
    args = {"budget": 1024, "path": "pkg/report.py", "language": "python"}
    p1 = assemble(gemma3, gemma3.encode(PREFIX), prefix=PREFIX, chunks=(old,), **args)
    typed = PREFIX + "nic"
    p2 = assemble(gemma3, gemma3.encode(typed), prefix=typed, chunks=(old,), **args)
    n = p1.context_tokens
    assert p1.tokens[:n] == p2.tokens[:n]
    p3 = assemble(gemma3, gemma3.encode(PREFIX), prefix=PREFIX, chunks=(edit, old), **args)
    util_part = p1.tokens[: n + 1 - count_tokens(gemma3, "# pkg/report.py\n")]
    assert p3.tokens[: len(util_part)] == util_part
    assert "def frobnicate_all" in _text(gemma3, p3.tokens[len(util_part) :])


def test_suffix_as_context_comes_before_the_document(gemma3):
    toks = gemma3.encode(PREFIX)
    suffix = "\n    return n + widget_total\n"
    p = assemble(gemma3, toks, prefix=PREFIX, suffix=suffix, path="r.py", suffix_as_context=True)
    text = _text(gemma3, p.tokens[1:])
    assert text.index("return n + widget_total") < text.index("# r.py\n") < text.index(PREFIX)
    assert p.tail == toks


def test_pieces_shown_last_time_stay_unless_a_clearly_better_one_comes(gemma3):
    from midword.completion.context import piece_key

    a = ContextChunk(
        "def alpha_helper(widget_registry):\n    return widget_registry.total_size + max_size\n", path="a.py"
    )
    b = ContextChunk("def beta_helper(widget_registry, count):\n    return count\n", path="b.py")
    prefix = "def report(widget_registry, count):\n    x = "
    first, _ = select(gemma3, (a, b), prefix=prefix, budget=30)
    assert [p.path for p in first] == ["b.py"]  # shares `count` too
    sticky = frozenset(piece_key(p) for p in first)
    typed = "def report(widget_registry, count):\n    x = widget_registry.total_size + max_size\n    y = "
    assert [p.path for p in select(gemma3, (a, b), prefix=typed, budget=30)[0]] == ["a.py"]
    assert [p.path for p in select(gemma3, (a, b), prefix=typed, budget=30, sticky=sticky)[0]] == ["b.py"]
    # a definition of a name now used near the cursor is clearly better
    called = typed + "alpha_helper(widget_registry)\n    z = "
    assert [p.path for p in select(gemma3, (a, b), prefix=called, budget=30, sticky=sticky)[0]] == ["a.py"]
