"""`midword bench cpc --repo PKG --coverage`: the context ranking alone, counted on cuts
made by hand in a package written by the test (no model)."""

from __future__ import annotations

import json

from byte_tokenizer import byte_tokenizer_json
from fim_support import fim_tokenizer

from midword.bench.cpc import Case
from midword.bench.cpc_repo import RepoCase, coverage, run_repo

UTIL = '''def frobnicate_widget_count(widget_registry):
    """How many widgets."""
    return len(widget_registry)
'''
MAIN = """import util


def report(widget_registry):
    return util.frobnicate_widget_count(widget_registry)
"""
FILES = {"pkg/util.py": UTIL, "pkg/main.py": MAIN, "other/far.py": "def unrelated_thing():\n    pass\n"}


def _cut(path: str, before: str) -> RepoCase:
    """A cut right after the first `before` in the module at `path`."""
    text = FILES[path]
    at = text.index(before) + len(before)
    truth = text[at:]
    return RepoCase(Case(f"{path}:{at}", text[:at], "", truth, truth.split("\n", 1)[0]), path, "")


def test_coverage_counts_where_the_completed_word_is_written(monkeypatch):
    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")
    tok = fim_tokenizer("plain")
    cases = [
        _cut("pkg/main.py", "util.frob"),  # frobnicate_widget_count: only in util.py
        _cut("pkg/main.py", "count(widget_re"),  # widget_registry: above, in the document
        _cut("pkg/main.py", "def rep"),  # report: nowhere else
    ]
    cov = coverage(tok, FILES, cases, budget=256)
    assert cov["cases"] == 3 and cov["in_document"] == 1 and cov["in_other_modules"] == 1
    assert cov["in_context"] == 1 and cov["context_tokens"] > 0
    # a budget too small for the util.py piece: the word is not in the context
    assert coverage(tok, FILES, cases[:1], budget=4)["in_context"] == 0


def test_coverage_command_needs_no_model(tmp_path, monkeypatch, capsys):
    import argparse

    from midword.bench.cpc import add_cpc_arguments
    from midword.bench.cpc_repo import add_repo_arguments

    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name, text in (("util.py", UTIL), ("main.py", MAIN)):
        (pkg / name).write_text(text)
    (tmp_path / "tokenizer.json").write_text(byte_tokenizer_json())
    p = argparse.ArgumentParser()
    add_cpc_arguments(p)
    add_repo_arguments(p)
    argv = ["--repo", str(pkg), "--coverage", "--limit", "8", "--json", "--model", str(tmp_path / "tokenizer.json")]
    assert run_repo(p.parse_args(argv)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cases"] == 8 and out["in_document"] + out["in_other_modules"] <= 8
    assert out["in_context"] <= out["in_other_modules"]
    assert run_repo(p.parse_args([*argv[:-1], str(tmp_path / "missing.json")])) == 2
    assert "cannot load its tokenizer" in capsys.readouterr().err
