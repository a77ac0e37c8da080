"""Line breaks other than LF (CR-only and CRLF files) in the decoding loop's stop rules
(completion/decode.py) and in block completions (completion/multiline.py): a
single-line completion stops at the file's own line break instead of decoding on to
max_tokens and being trimmed afterwards."""

from __future__ import annotations

import pytest
from fim_support import MiddleModel

from midword.completion.decode import Generation, StopRules, _stop_reason, _trim
from midword.completion.engine import CompletionEngine
from midword.completion.multiline import Block, block_end, plan, trim_block
from midword.completion.types import CompletionRequest, GrammarSpec


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")


REST = "print(value)"  # what the model would go on with on the next lines


def _complete(tokenizer, middle: str, prefix: str, multiline: str = "never"):
    model = MiddleModel(tokenizer, middle, min(tokenizer.eos_token_ids), lead_space=False)
    engine = CompletionEngine("middle", model_object=model)
    return engine.complete(
        CompletionRequest(
            prefix=prefix,
            language="python",
            mode="naive",
            grammar=GrammarSpec(kind="none"),
            max_tokens=40,
            multiline=multiline,
            time_budget_s=600.0,  # the stand-in model scans Gemma's whole vocabulary per step
        )
    )


@pytest.mark.parametrize("brk", ["\r", "\r\n"], ids=["cr", "crlf"])
def test_single_line_completion_stops_at_the_files_line_break(gemma3, brk):
    middle = f"value){brk}    {REST}{brk}    return value{brk}"
    c = _complete(gemma3, middle, f"def f(value):{brk}    x = g(")
    assert c.text == "value)"
    assert c.stop_reason == "newline"
    # It stopped at the break: far fewer tokens than the whole middle (which the model
    # would have written out to its stop token before).
    assert c.timings.tokens_generated < len(gemma3.encode(middle)) - len(gemma3.encode(REST))


def test_stop_rules_see_every_kind_of_line_break():
    one = StopRules(single_line=True)
    for text in (b"x)\r", b"x)\r\n", b"x)\n"):
        assert _stop_reason(Generation(inserted=text), one, started=1e18) == "newline"
        assert _trim(text + b"more", one, Generation()) == b"x)"
    block = StopRules(single_line=False)
    for text, kept in ((b"a()\r\rb()", b"a()\r"), (b"a()\r\n\r\nb()", b"a()\r\n"), (b"a()\n\nb()", b"a()\n")):
        assert _stop_reason(Generation(inserted=text), block, started=1e18) == "blank_line"
        assert _trim(text, block, Generation()) == kept
    # One CRLF is one line break, not a blank line; a CR at the end may still become one.
    for text in (b"a()\r\nb()", b"a()\r"):
        assert _stop_reason(Generation(inserted=text), block, started=1e18) == ""


def test_blocks_end_by_indentation_in_cr_and_crlf_files():
    for brk in ("\r", "\r\n"):
        body = f"{brk}    y = x + 1{brk}{brk}    return y{brk}def g():{brk}"
        text = body.encode()
        end = block_end(text, Block("def f(x):", 1))
        assert text[:end] == f"{brk}    y = x + 1{brk}{brk}    return y".encode()
        assert trim_block(b"a()\rb()\rc(x, ", Block("", 0), cut_off=True) == b"a()\rb()"
        assert plan(f"x = 1{brk}def f(x):", f"{brk}rest", "auto", True) == (False, Block("def f(x):", 1))


def test_engine_block_completion_in_a_cr_file(gemma3):
    body = "\r    y = x + 1\r\r    return y\r\r\rdef g():\r    pass\r"
    c = _complete(gemma3, body, "def f(x):", multiline="auto")
    assert c.text == "\r    y = x + 1\r\r    return y" and c.stop_reason == "block_end"
