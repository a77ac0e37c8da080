"""The VS Code extension's contributed settings (vscode-client/package.json) against the
server's settings parser: every key the server accepts is contributed, with the same
default and the same bounds, and nothing else under `midword.` except the client's own."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from midword.completion.types import MODES
from midword.server.settings import _KEYS, Settings, _camel_value, parse_settings

PACKAGE = Path(__file__).resolve().parents[2] / "vscode-client" / "package.json"
CLIENT_ONLY = {"serverCommand", "serverEnv", "trace.server"}  # the extension's, never sent


@pytest.fixture(scope="module")
def contributed() -> dict[str, dict]:
    properties = json.loads(PACKAGE.read_text(encoding="utf-8"))["contributes"]["configuration"]["properties"]
    return {key.removeprefix("midword."): spec for key, spec in properties.items() if key.startswith("midword.")}


def test_every_server_setting_is_contributed_and_nothing_else(contributed):
    assert set(contributed) - CLIENT_ONLY == set(_KEYS)
    assert CLIENT_ONLY <= set(contributed)
    # _KEYS is the parser's table; it should name every field of Settings.
    assert {name for name, _check in _KEYS.values()} == {f.name for f in fields(Settings)}


def test_defaults_agree(contributed):
    server_defaults = Settings()
    for key, (name, _check) in _KEYS.items():
        assert contributed[key]["default"] == _camel_value(getattr(server_defaults, name)), key
    # The defaults, sent as the extension sends them, parse cleanly to the server's defaults.
    settings, problems = parse_settings({"midword": {key: contributed[key]["default"] for key in _KEYS}})
    assert problems == []
    assert settings == server_defaults


def test_types_and_bounds_agree(contributed):
    for key, (_name, check) in _KEYS.items():
        spec = contributed[key]
        if "minimum" in spec:
            check(key, spec["minimum"])
            with pytest.raises(ValueError):
                check(key, spec["minimum"] - (1 if spec["type"] == "integer" else 0.01))
        if "maximum" in spec:
            check(key, spec["maximum"])
            with pytest.raises(ValueError):
                check(key, spec["maximum"] + (1 if spec["type"] == "integer" else 0.01))
        if spec["type"] == "integer":
            with pytest.raises(ValueError):
                check(key, spec["default"] + 0.5)
        if spec["type"] == "boolean":
            with pytest.raises(ValueError):
                check(key, 1)
    assert set(contributed["mode"]["enum"]) == set(MODES)
    for mode in contributed["mode"]["enum"]:
        _KEYS["mode"][1]("mode", mode)
    assert len(contributed["mode"]["enumDescriptions"]) == len(contributed["mode"]["enum"])


def test_every_setting_is_described(contributed):
    for key, spec in contributed.items():
        assert spec.get("description") or spec.get("markdownDescription"), key
