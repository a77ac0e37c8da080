"""`midword bench masks --worst N`: each mask is recorded with the instance and token
position it was filled at, and the listing names the slowest ones with the text before
them and the other engines' time at that same step."""

from __future__ import annotations

from test_bench_masks import EOS, SequenceEngine, case, inst

from midword.bench.masks import FileResult, run_file
from midword.bench.masks_report import WorstMasks


def test_every_mask_knows_its_step():
    c = case([[1, 2, 3]], inst(True, [1, 2, 3]), inst(False, [1, 4]))
    for compile_per in ("test", "file"):
        r = run_file(SequenceEngine(), c, [EOS], compile_per=compile_per)
        assert len(r.mask_steps) == len(r.tbm_ns)
        # the valid instance: positions 0..2 and the end (3); the invalid one stops at 1
        assert r.mask_steps == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]


def test_worst_lists_the_slowest_with_context_and_peers():
    c = case([[1, 2, 3]], inst(True, [1, 2, 3]))
    steps = [(0, 0), (0, 1), (0, 2), (0, 3)]
    mine = FileResult(file="toy.json", tbm_ns=[1_000, 90_000, 5_000, 40_000], mask_steps=steps)
    theirs = FileResult(file="toy.json", tbm_ns=[2_000, 3_000, 4_000, 7_000], mask_steps=steps)
    worst = WorstMasks(2)
    worst.add(c, {"midword": mine, "peer": theirs})
    text = worst.format()
    lines = text.splitlines()
    at = lines.index("midword: the 2 slowest masks (µs; the others' at the same step)")
    # slowest first; token 1 comes after the text "b" (token 0 spells "b")
    assert lines[at + 1].split() == ["90", "toy.json", "test", "0", "token", "1", "[peer", "3]", "after", "'b'"]
    assert lines[at + 2].split()[:6] == ["40", "toy.json", "test", "0", "token", "3"]
    assert lines[at + 2].endswith("after 'bcd'")
    assert "peer: the 2 slowest masks" in text


def test_worst_keeps_n_across_files():
    worst = WorstMasks(3)
    for k in range(5):
        c = case([[1]], inst(True, [1]))
        c.name = f"f{k}.json"
        worst.add(c, {"e": FileResult(file=c.name, tbm_ns=[1000 * (k + 1), 10], mask_steps=[(0, 0), (0, 1)])})
    lines = [line for line in worst.format().splitlines() if "json" in line]
    assert [line.split()[1] for line in lines] == ["f4.json", "f3.json", "f2.json"]
