"""Block completions (completion/multiline.py): when a block is wanted, where it ends by
indentation, and the engine's decoding loop stopping there."""

from __future__ import annotations

import pytest
from fim_support import MiddleModel, fim_tokenizer

from midword.completion.engine import CompletionEngine
from midword.completion.multiline import Block, block_end, plan, trim_block
from midword.completion.types import CompletionRequest, GrammarSpec


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")


def test_plan_auto_completes_blocks_only_after_an_opener_or_on_an_empty_line():
    assert plan("def f(x):", "", "auto", True) == (False, Block("def f(x):", 1))
    assert plan("def f(x):\n    ", "\n", "auto", True) == (False, Block("    ", 0))
    assert plan("if (a) {", ")", "auto", True)[1] == Block("if (a) {", 1)
    assert plan("    x = fo", "", "auto", True) == (True, None)  # inside a line
    assert plan("def f(x):", " pass", "auto", True) == (True, None)  # text after the cursor
    assert plan("    x = fo", "", "always", True) == (False, Block("    x = fo", 4))
    assert plan("def f(x):", "", "never", True) == (True, None)
    assert plan("def f(x):", "", "never", False) == (False, None)  # the request's own line mode


def test_block_ends_at_the_first_line_indented_less_than_the_block():
    b = Block("def f(x):", 1)
    text = b"\n    y = x + 1\n\n    return y\ndef g():\n    pass\n"
    end = block_end(text, b)
    assert text[:end] == b"\n    y = x + 1\n\n    return y"
    assert block_end(b"\n    y = x + 1\n    ret", b) == -1  # still inside
    # a body must be deeper than the opener's line
    assert block_end(b"\nx = 1\n", b) == 0
    # on an empty line the first line sets the block's indentation
    e = Block("    ", 0)
    text = b"for a in b:\n        go(a)\n    done()\nreturn 1\n"
    assert text[: block_end(text, e)] == b"for a in b:\n        go(a)\n    done()"
    # a dedent inside a line is not known until the line has text
    assert block_end(b"x = 1\n  ", e) == -1


def test_block_is_capped_in_lines_and_a_cut_off_line_dropped():
    b = Block("    ", 0, max_lines=3)
    text = b"a()\n    b()\n    c()\n    d()\n"
    assert text[: block_end(text, b)] == b"a()\n    b()\n    c()"
    assert trim_block(b"a()\nb()\nc(x, ", Block("", 0), cut_off=True) == b"a()\nb()"
    assert trim_block(b"a()\nb()\n\n\n", Block("", 0), cut_off=False) == b"a()\nb()"
    assert trim_block(b"rest_of_line(", Block("x = ", 0), cut_off=True) == b"rest_of_line("


def _engine(middle):
    tok = fim_tokenizer("plain")
    return CompletionEngine("lines", model_object=MiddleModel(tok, middle, min(tok.eos_token_ids), lead_space=False))


def _complete(engine, prefix, multiline, suffix=""):
    return engine.complete(
        CompletionRequest(
            prefix=prefix,
            suffix=suffix,
            language="python",
            mode="naive",
            grammar=GrammarSpec(kind="none"),
            max_tokens=200,
            multiline=multiline,
        )
    )


def test_engine_completes_a_block_after_an_opener():
    body = "\n    y = x + 1\n\n    return y\n\n\ndef g():\n    pass\n"
    engine = _engine(body.lstrip(" "))
    c = _complete(engine, "def f(x):", "auto")
    assert c.text == "\n    y = x + 1\n\n    return y" and c.stop_reason == "block_end"
    assert _complete(engine, "def f(x):", "never").text == ""  # one line: the rest of this one


def test_engine_keeps_one_line_inside_a_line():
    engine = _engine("x + 1\n    return y\n")
    assert _complete(engine, "    y = ", "auto").text == "x + 1"
    c = _complete(engine, "    y = ", "always")
    assert c.text == "x + 1\n    return y"
