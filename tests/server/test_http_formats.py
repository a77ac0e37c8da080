"""Unit tests of the HTTP wire-format helpers (`server.http_formats`): FIM templates
parsed back into prefix and suffix, field checks that name the field, the cuts
llama.cpp's options ask for, and `response_fields` flattening."""

from __future__ import annotations

import json

import pytest

from midword.server.http_formats import (
    FIM_MARKERS,
    BadRequest,
    cut_at_indent,
    cut_at_stop,
    get_int,
    get_stop,
    get_str,
    infill_extra,
    parse_fim_prompt,
    parse_json_body,
    select_fields,
    strip_markers,
)

P = "def total(items):\n    s = 0\n    for it in ite"
S = "\n    return s\n"

# The templates the clients put around prefix P and suffix S (Continue's
# core/autocomplete/templating/AutocompleteTemplate.ts, Tabby's prompt_template
# settings, minuet-ai's openai_fim_compatible template, Zed's EditPredictionPromptFormat).
TEMPLATES = {
    "starcoder": f"<fim_prefix>{P}<fim_suffix>{S}<fim_middle>",
    "starcoder2 repo": f"<repo_name>shop\n<file_sep>util.py\ndef helper():\n    pass\n<file_sep>cart.py\n"
    f"<fim_prefix>{P}<fim_suffix>{S}<fim_middle>",
    "qwen": f"<|fim_prefix|>{P}<|fim_suffix|>{S}<|fim_middle|>",
    "qwen repo": f"<|repo_name|>shop\n<|file_sep|>util.py\ndef helper():\n    pass\n<|file_sep|>cart.py\n"
    f"<|fim_prefix|>{P}<|fim_suffix|>{S}<|fim_middle|>",
    "codellama": f"<PRE> {P} <SUF>{S} <MID>",
    "deepseek": f"<\uff5cfim\u2581begin\uff5c>{P}<\uff5cfim\u2581hole\uff5c>{S}<\uff5cfim\u2581end\uff5c>",
    "codestral": f"[SUFFIX]{S}[PREFIX]{P}",
    # TabbyML/tabby crates/http-api-bindings/src/completion/mod.rs FIM_TEMPLATE
    "tabby": f"{P}<|FIM|>{S}",
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_fim_templates_parse_back(name):
    fim = parse_fim_prompt(TEMPLATES[name])
    assert (fim.prefix, fim.suffix) == (P, S)
    for marker in FIM_MARKERS:
        assert marker not in fim.prefix and marker not in fim.suffix
    if "repo" in name:
        assert fim.filename == "cart.py"
        assert [(c.path, c.text) for c in fim.context] == [("util.py", "def helper():\n    pass\n")]
    else:
        assert fim.context == []


def test_plain_prompt_with_openai_suffix_and_crlf():
    fim = parse_fim_prompt("a = 1\r\nb = a", "\r\nprint(b)\r\n")
    assert (fim.prefix, fim.suffix, fim.family) == ("a = 1\nb = a", "\nprint(b)\n", "plain")


def test_strip_markers_cuts_at_the_first_marker():
    assert strip_markers("ems:<|fim_middle|>junk") == "ems:"
    assert strip_markers("ems:\n<EOT>") == "ems:\n"
    assert strip_markers("plain text") == "plain text"


def test_fields_name_what_is_wrong():
    with pytest.raises(BadRequest, match='"input_suffix" is required'):
        get_str({"input_prefix": ""}, "input_suffix")
    with pytest.raises(BadRequest, match='"n_predict" must be an integer, got a string'):
        get_int({"n_predict": "12"}, "n_predict", None)
    with pytest.raises(BadRequest, match='"n_predict" must be an integer, got a boolean'):
        get_int({"n_predict": True}, "n_predict", None)
    assert get_int({"n_predict": 12.0}, "n_predict", None) == 12
    with pytest.raises(BadRequest, match='"stop" must be a string or an array of strings'):
        get_stop({"stop": [1]})
    assert get_stop({"stop": "\r\n"}) == ["\n"]
    with pytest.raises(BadRequest, match=r'"input_extra\[1\].text" must be a string'):
        infill_extra({"input_extra": [{"text": "a"}, {"text": 5}]})


def test_body_must_be_a_json_object():
    with pytest.raises(BadRequest, match="not valid JSON.*line 1 column 2"):
        parse_json_body(b"{bad")
    with pytest.raises(BadRequest, match="must be a JSON object, got an array"):
        parse_json_body(b"[1]")
    with pytest.raises(BadRequest, match="empty"):
        parse_json_body(b"  ")
    with pytest.raises(BadRequest, match="not UTF-8"):
        parse_json_body(b'{"a": "\xff"}')
    assert parse_json_body(json.dumps({"a": 1}).encode()) == {"a": 1}


def test_response_fields_flatten_under_literal_keys():
    answer = {"content": "x", "timings": {"prompt_n": 3, "predicted_ms": 1.5}, "truncated": False}
    # llama.vim (autoload/llama.vim) asks for these and reads them as flat keys
    assert select_fields(answer, ["content", "timings/prompt_n", "timings/predicted_ms", "truncated", "missing/x"]) == {
        "content": "x",
        "timings/prompt_n": 3,
        "timings/predicted_ms": 1.5,
        "truncated": False,
    }
    # its warm-up request asks for [""]: nothing
    assert select_fields(answer, [""]) == {}


def test_n_indent_cut_and_stop_strings():
    text = "\n        a = 1\n\n        b = 2\n    return a\n"
    assert cut_at_indent(text, 8) == "\n        a = 1\n\n        b = 2\n"
    assert cut_at_indent(text, 0) == text
    assert cut_at_indent("one line", 8) == "one line"
    assert cut_at_stop("a = 1\n\nb", ["\n\n", "b"]) == ("a = 1", "\n\n")
    assert cut_at_stop("a = 1", []) == ("a = 1", None)
