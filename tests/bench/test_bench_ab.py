"""`midword bench ab`: another revision's engine beside this checkout's, in one process."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from midword.bench.ab import format_ab, prepare_revision, source_root, summarize
from midword.bench.masks import BenchInputError, FileResult
from midword.engine.regex import ExprSet

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT.parent / "shared" / "data" / "maskbench-dev"

needs_git = pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")


@needs_git
def test_a_revision_is_importable_under_its_own_name_and_kept(tmp_path):
    name = prepare_revision("HEAD", cache_dir=tmp_path)
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert name == f"midword_at_{sha[:12]}"
    regex = importlib.import_module(f"{name}.engine.regex")
    # Another copy of the code: its own classes, and its own process-wide caches.
    assert regex.ExprSet is not ExprSet
    assert Path(regex.__file__).resolve().is_relative_to(tmp_path.resolve())
    es = regex.ExprSet()
    assert regex.LazyDFA(es, es.parse("ab+c")).matches(b"abbbc")
    marker = tmp_path / sha[:12] / name / ".complete"
    stamp = marker.stat().st_mtime_ns
    assert prepare_revision("HEAD", cache_dir=tmp_path) == name
    assert marker.stat().st_mtime_ns == stamp  # taken from git once


@needs_git
def test_an_unknown_revision_is_refused_by_name(tmp_path):
    with pytest.raises(BenchInputError, match="no-such-revision"):
        prepare_revision("no-such-revision", cache_dir=tmp_path)


def test_source_root_is_this_checkout():
    if not (ROOT / ".git").exists():
        with pytest.raises(BenchInputError):
            source_root()
    else:
        assert source_root() == ROOT


def test_the_table_gives_each_figure_and_its_change():
    def result(tbm, ttfm, passed=True):
        r = FileResult(file="f.json", tests_total=1)
        r.tbm_ns, r.ttfm_ns = list(tbm), list(ttfm)
        r.tests_run = r.valid_tests = 1
        if not passed:
            r.rejected_valid = 1
        return r

    new = summarize([result([1000, 2000, 3000], [10_000]), result([4000], [20_000])])
    old_results = [result([2000, 4000, 6000], [10_000]), result([8000], [30_000], passed=False)]
    old_results[0].ff_calls, old_results[0].ff_ns = 4, 8_000
    old = summarize(old_results)
    assert new["ff_avg"] is None and old["ff_avg"] == pytest.approx(2.0)
    assert new["masks"] == old["masks"] == 4
    assert new["tbm_avg"] == pytest.approx(2.5) and old["tbm_avg"] == pytest.approx(5.0)
    assert (new["passed"], old["passed"]) == (2, 1)
    table = format_ab(new, old, "this checkout", "HEAD")
    rows = {line.split("  ")[0].strip(): line for line in table.splitlines()[1:]}
    assert rows["TBM avg"].split()[-1] == "-50.0%"
    assert rows["TTFM mean"].split()[-1] == "-25.0%"
    assert "%" not in rows["files passed"]
    assert rows["ff call avg"].split()[-2:] == ["-", "-"]  # no fast-forward calls on one side


@pytest.mark.slow
@needs_git
def test_bench_ab_runs_both_engines_on_maskbench_files(tmp_path):
    if not DEV.is_dir():
        pytest.skip("no MaskBench dev set beside the checkout")
    files = sorted(DEV.glob("*.json"))[:2]
    out = subprocess.run(
        [sys.executable, "-m", "midword", "bench", "ab", *map(str, files), "--against", "HEAD", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    import json

    got = json.loads(out.stdout)
    assert set(got) == {"this checkout", "HEAD"}
    for figures in got.values():
        assert figures["masks"] > 0 and figures["tbm_avg"] > 0 and figures["ttfm_p50"] > 0
    # The same files and instances through two copies of the engine: the same masks.
    assert got["this checkout"]["masks"] == got["HEAD"]["masks"]
    assert got["this checkout"]["passed"] == got["HEAD"]["passed"] == 2
