"""`midword bench cpc --repo`: the repository setting's cases, settings and table, on a
package written by the test and a scripted model (the real figures come from the command)."""

from __future__ import annotations

import argparse

import pytest
from fim_support import MiddleModel, fim_tokenizer

from midword.bench.cpc import add_cpc_arguments
from midword.bench.cpc_repo import (
    add_repo_arguments,
    package_files,
    run_repo,
    sample_cases,
)
from midword.completion.engine import CompletionEngine

UTIL = """def frobnicate_widget_count(widget_registry):
    return len(widget_registry)


def other_helper(value):
    return value
"""
MAIN = """from pkg.util import frobnicate_widget_count


def report(widget_registry):
    total = frobnicate_widget_count(widget_registry)
    return total
"""


@pytest.fixture
def package(tmp_path, monkeypatch):
    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")  # empty: no module
    (root / "util.py").write_text(UTIL)
    (root / "main.py").write_text(MAIN)
    return root


def _args(*argv):
    p = argparse.ArgumentParser()
    add_cpc_arguments(p)
    add_repo_arguments(p)
    return p.parse_args(list(argv))


def test_cases_cut_words_of_one_module_and_hide_the_rest_of_its_line(package):
    files = package_files(package)
    assert sorted(files) == ["pkg/main.py", "pkg/util.py"]
    cases = sample_cases(files, 6, seed=1, module="main.py")
    assert len(cases) == 6 and {c.path for c in cases} == {"pkg/main.py"}
    for rc in cases:
        text = files[rc.path]
        cut = len(text) - len(rc.case.truth)
        assert text[:cut].endswith(rc.case.prefix) and rc.case.typed_word
        # the suffix starts on the next line: the rest of the cursor's line is the truth, never shown
        assert text[cut:].startswith(rc.case.line_truth + ("\n" + rc.suffix if rc.suffix else ""))


def test_repository_bench_runs_each_setting_and_reports_context_tokens(package, capsys):
    tok = fim_tokenizer("plain")
    engine = CompletionEngine("scripted", model_object=MiddleModel(tok, "x", min(tok.eos_token_ids)))
    args = _args("--repo", str(package), "--limit", "3", "--modes", "cpc", "--suffix", "--quiet", "--json")
    assert run_repo(args, engine=engine) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    s = out["settings"]
    assert out["cases"] == 3 and set(s) == {"off/cpc", "on/cpc", "suffix/cpc"}
    assert s["off/cpc"]["context"] == 0 and s["on/cpc"]["context"] > 0
    assert s["on/cpc"]["prompt"] > s["off/cpc"]["prompt"]
    assert engine.suffix_context is False  # the setting is put back


def test_bad_repository_arguments_are_reported(tmp_path, capsys):
    assert run_repo(_args("--repo", str(tmp_path / "missing"))) == 2
    assert "neither a directory nor a standard-library package" in capsys.readouterr().err
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.py").write_text("x = 1\n")
    assert run_repo(_args("--repo", str(tmp_path / "one"))) == 2
    assert "two or more modules" in capsys.readouterr().err
