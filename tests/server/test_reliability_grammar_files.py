"""Grammar and schema files named by a document (`$schema`) or by the settings
(`midword.grammars`) are read only when they are regular files inside the workspace
folders, at most `MAX_GRAMMAR_FILE_BYTES` of them, and a refusal names the path but
never the file's content (issue 31, items 1 and 9)."""

from __future__ import annotations

import json
import os

import pytest

from midword.completion.types import GrammarSpec
from midword.grammars import read_grammar
from midword.server.grammar_choice import MAX_GRAMMAR_FILE_BYTES, GrammarResolver, bundled_schema
from midword.server.settings import Settings

PLAIN_JSON = GrammarSpec(kind="lark", source=read_grammar("json.lark"))


def _choose(ref: str, doc, root, **kw):
    return GrammarResolver().choose(
        path=str(doc),
        language_id="json",
        text='{"$schema": %s, "a": ' % json.dumps(ref),
        settings=Settings(),
        root=str(root),
        roots=[str(root)],
        **kw,
    )


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/proc/self/status", "/proc/self/fd/0"])
def test_devices_and_proc_files_are_refused(tmp_path, device):
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist here")
    c = _choose(device, tmp_path / "d.json", tmp_path)
    assert c.spec == PLAIN_JSON and device in c.note


def test_a_device_inside_the_workspace_is_refused_as_not_regular(tmp_path):
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    r = GrammarResolver()
    with pytest.raises(ValueError, match="not a regular file"):
        r.read(str(tmp_path / "zero.json"), ["/dev"])


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "s.json"
    os.mkfifo(fifo)
    c = _choose("./s.json", tmp_path / "d.json", tmp_path)  # would block forever in open() or read()
    assert c.spec == PLAIN_JSON and "s.json is not a regular file" in c.note


def test_files_outside_the_workspace_are_refused_and_never_quoted(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.json").write_text('{"type": "SECRET", "enum": ["SECRET"]}')
    c = _choose("../outside/x.json", tmp_path / "ws" / "d.json", tmp_path / "ws")
    assert c.spec == PLAIN_JSON and "outside the workspace" in c.note and "x.json" in c.note
    assert "SECRET" not in c.note
    # absolute paths and file: URIs too
    c = _choose(str(tmp_path / "outside" / "x.json"), tmp_path / "ws" / "d.json", tmp_path / "ws")
    assert c.spec == PLAIN_JSON and "outside the workspace" in c.note
    c = _choose((tmp_path / "outside" / "x.json").as_uri(), tmp_path / "ws" / "d.json", tmp_path / "ws")
    assert c.spec == PLAIN_JSON and "outside the workspace" in c.note
    # a link inside the workspace to a file outside it
    (tmp_path / "ws" / "link.json").symlink_to(tmp_path / "outside" / "x.json")
    c = _choose("./link.json", tmp_path / "ws" / "d.json", tmp_path / "ws")
    assert c.spec == PLAIN_JSON and "outside the workspace" in c.note and "SECRET" not in c.note
    # /etc/passwd-style reads: refused whatever their content
    c = _choose("/etc/hostname", tmp_path / "ws" / "d.json", tmp_path / "ws")
    assert c.spec == PLAIN_JSON and "outside the workspace" in c.note


def test_a_lark_file_in_the_settings_goes_through_the_same_checks(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "secret.lark").write_text("start: /SECRET/\n")
    settings = Settings(grammars=(("*.kv", str(tmp_path / "secret.lark")), ("*.z", "/dev/zero.lark")))
    r = GrammarResolver()
    c = r.choose(
        path=str(tmp_path / "ws" / "a.kv"),
        language_id="kv",
        text="",
        settings=settings,
        root=str(tmp_path / "ws"),
        roots=[str(tmp_path / "ws")],
    )
    assert c.spec == GrammarSpec(kind="auto") and "outside the workspace" in c.note and "SECRET" not in c.note
    # inside the workspace it is read
    (tmp_path / "ws" / "kv.lark").write_text("start: /[a-z]+/\n")
    settings = Settings(grammars=(("*.kv", "kv.lark"),))
    c = r.choose(
        path=str(tmp_path / "ws" / "a.kv"),
        language_id="kv",
        text="",
        settings=settings,
        root=str(tmp_path / "ws"),
        roots=[str(tmp_path / "ws")],
    )
    assert c.spec == GrammarSpec(kind="lark", source="start: /[a-z]+/\n")


def test_bundled_schemas_are_always_available(tmp_path):
    c = _choose("https://json.schemastore.org/package.json", tmp_path / "d.json", tmp_path)
    assert c.spec.kind == "json_schema" and c.spec.source == bundled_schema("package.json")


def test_several_workspace_folders(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    (tmp_path / "b" / "s.json").write_text('{"type": "string"}')
    r = GrammarResolver()
    c = r.choose(
        path=str(tmp_path / "a" / "d.json"),
        language_id="json",
        text='{"$schema": "%s"}' % (tmp_path / "b" / "s.json"),
        settings=Settings(),
        root=str(tmp_path / "a"),
        roots=[str(tmp_path / "a"), str(tmp_path / "b")],
    )
    assert c.spec.kind == "json_schema" and c.note is None


def test_size_is_capped_by_what_is_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: st_size says it all
        f.truncate(MAX_GRAMMAR_FILE_BYTES + 1)
    c = _choose("./big.json", tmp_path / "d.json", tmp_path)
    assert c.spec == PLAIN_JSON and "limited to" in c.note


def test_not_utf8_is_named(tmp_path):
    (tmp_path / "s.json").write_bytes(b'{"type": "\xff"}')
    c = _choose("./s.json", tmp_path / "d.json", tmp_path)
    assert c.spec == PLAIN_JSON and "not UTF-8" in c.note


def test_a_schema_nested_too_deeply_falls_back_with_a_note(tmp_path):
    (tmp_path / "deep.json").write_text('{"items": ' * 5000 + "{}" + "}" * 5000)
    c = _choose("./deep.json", tmp_path / "d.json", tmp_path)
    assert c.spec == PLAIN_JSON and "nested too deeply" in c.note
