"""MaskBench's report: engines side by side, with midword/peer ratios for the timing rows."""

from __future__ import annotations

import heapq
from typing import Any

_ROWS = [
    # (label, key, is_timing)
    ("files", "files", False),
    ("passed", "passed", False),
    ("compile errors", "compile_errors", False),
    ("timeouts", "timeouts", False),
    ("crashes + errors", None, False),
    ("accepted invalid", "accepted_invalid", False),
    ("rejected valid", "rejected_valid", False),
    ("mask/consume mismatches", "mask_mismatches", False),
    ("masks", "masks", False),
    ("TBM avg (µs)", "tbm_avg_us", True),
    ("TBM p50 (µs)", "tbm_p50_us", True),
    ("TBM p90 (µs)", "tbm_p90_us", True),
    ("TBM p99 (µs)", "tbm_p99_us", True),
    ("TBM max (µs)", "tbm_max_us", True),
    ("TTFM p50 (µs)", "ttfm_p50_us", True),
    ("TTFM p90 (µs)", "ttfm_p90_us", True),
    ("TTFM p99 (µs)", "ttfm_p99_us", True),
    ("TTFM max (µs)", "ttfm_max_us", True),
    ("ff share", "ff_share", False),
    ("non-canonical ff", "ff_noncanonical", False),
    ("ff share, canonical only", "ff_canonical_share", False),
    ("ff call avg (µs)", "ff_avg_us", False),
]


def _fmt(value: Any, key: str | None) -> str:
    if value is None:
        return "n/a"
    if key in ("ff_share", "ff_canonical_share"):
        return f"{100.0 * value:.1f}%"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


# The timing rows again, over the files every engine compiled and ran to the end.
_SAME_FILES_ROWS = [("files", "files", False), ("masks", "masks", False)] + [row for row in _ROWS if row[2]]


def _side_by_side(summaries: dict[str, dict[str, Any]], row_specs: list) -> str:
    engines = list(summaries)
    ratio_cols = [p for p in engines if p != "midword"] if "midword" in engines else []
    header = ["metric"] + engines + [f"midword/{p}" for p in ratio_cols]
    rows = [header]
    for label, key, timing in row_specs:
        cells = [label]
        for e in engines:
            s = summaries[e]
            value = s["crashes"] + s["errors"] if key is None else s.get(key)
            cells.append(_fmt(value, key))
        for p in ratio_cols:
            mine, theirs = summaries["midword"].get(key), summaries[p].get(key)
            cells.append(f"{mine / theirs:.2f}x" if timing and mine is not None and theirs else "")
        rows.append(cells)
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = []
    for n, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(r[1:], widths[1:], strict=False)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_table(summaries: dict[str, dict[str, Any]]) -> str:
    """Engines side by side, with midword/peer ratios for the timing rows; then, when
    the summaries have them, the timing rows over the files every engine ran."""
    engines = list(summaries)
    out = [_side_by_side(summaries, _ROWS)]
    if all(summaries[e].get("same_files") for e in engines):
        out.append("\nSame instances: the files every engine compiled and ran to the end")
        out.append(_side_by_side({e: summaries[e]["same_files"] for e in engines}, _SAME_FILES_ROWS))
    for e in engines:
        s = summaries[e]
        out.append(f"\n{e}: {s.get('engine', '')}")
        if s.get("mask_categories"):
            out.append(f"  {'masks by category':<18} {'% masks':>8} {'% time':>8} {'us/mask':>9}")
            out += [
                f"  {c['category']:<18} {100 * c['masks_share']:>7.1f}% {100 * c['time_share']:>7.1f}%"
                f" {c['us_per_mask']:>9.1f}"
                for c in s["mask_categories"]
            ]
        if s["compile_error_reasons"]:
            out.append("  compile errors, top reasons:")
            out += [f"    {n:5d}  {reason}" for reason, n in s["compile_error_reasons"]]
        if s["error_reasons"]:
            out.append("  engine errors / crashes:")
            out += [f"    {n:5d}  {reason}" for reason, n in s["error_reasons"]]
        if s["timed_out_files"]:
            out.append("  timed out:")
            out += [f"    {line}" for line in s["timed_out_files"]]
        if s.get("encode_mismatches"):
            out.append(f"  own tokenizer differs from the reference on {s['encode_mismatches']} instances")
    return "\n".join(out)


class WorstMasks:
    """The `n` slowest masks of each engine, with where they were filled (file, instance,
    token position, the text just before) and what the other engines took at that same
    step: the masks behind an engine's TBM max and p99."""

    def __init__(self, n: int):
        self.n = n
        self._heaps: dict[str, list[tuple[int, str, int, int, str, dict[str, int]]]] = {}

    def add(self, case, done: dict) -> None:
        """Takes one file's results (engine -> FileResult) over `case`, a masks_dataset.Case."""
        by_step = {e: dict(zip(r.mask_steps, r.tbm_ns, strict=False)) for e, r in done.items()}
        for e, r in done.items():
            heap = self._heaps.setdefault(e, [])
            for ns, (idx, pos) in zip(r.tbm_ns, r.mask_steps, strict=False):
                if len(heap) >= self.n and ns <= heap[0][0]:
                    continue
                others = {o: steps[(idx, pos)] for o, steps in by_step.items() if o != e and (idx, pos) in steps}
                item = (ns, case.name, idx, pos, _text_before(case, idx, pos), others)
                if len(heap) < self.n:
                    heapq.heappush(heap, item)
                else:
                    heapq.heapreplace(heap, item)

    def format(self) -> str:
        lines = []
        for e, heap in self._heaps.items():
            lines.append(f"\n{e}: the {len(heap)} slowest masks (µs; the others' at the same step)")
            for ns, name, idx, pos, before, others in sorted(heap, reverse=True):
                peers = " ".join(f"{o} {v / 1000:,.0f}" for o, v in others.items())
                lines.append(f"  {ns / 1000:>9,.0f}  {name} test {idx} token {pos}  [{peers}]  after {before!r}")
        return "\n".join(lines)


def _text_before(case, idx: int, pos: int, width: int = 40) -> str:
    if idx >= len(case.instances):
        return ""
    inst = case.instances[idx]
    end = inst.offsets[pos] if pos < len(inst.offsets) else len(inst.text)
    return inst.text[max(0, end - width) : end]
