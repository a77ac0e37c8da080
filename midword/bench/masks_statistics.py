"""MaskBench figures: per engine, the files' results summed into counts and time percentiles."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np

from .masks_runner import MASK_CATEGORIES, FileResult


def reason_key(message: str) -> str:
    """Group compile errors by cause: the words before the place or the offending value."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    line = lines[0]
    # Native log prefixes ("[02:37:44] /src/x.cc:32: ") and wrapper exception names
    # ("MatcherError: LimitExceeded: ...") say nothing about the cause.
    line = re.sub(r"^\[[\d:.]+\]\s*\S+:\d+:\s*", "", line)
    line = re.sub(
        r"^(?:(?:[Ee]rror|MatcherError|RuntimeError|ValueError|GrammarError|LimitExceeded)\s*:\s*)+(?=\S)",
        "",
        line,
    )
    for sep in (" at /", " at #", " at line ", " at offset ", " (at ", ". "):
        k = line.find(sep)
        if k >= 8:
            line = line[:k]
    k = line.find(": ")
    if k >= 8:
        # A one-word or bracketed detail is the cause itself ("Unknown format: regex",
        # 'Unimplemented keys: ["if"]'); anything longer is a place or a value.
        detail = line[k + 2 :]
        if not re.fullmatch(r"\w+|\[[^\]]{0,60}\]", detail):
            line = line[:k]
    line = re.sub(r"\d+", "N", line)
    return line[:90]


def _category_table(rs: list[FileResult]) -> list[dict[str, Any]] | None:
    """Share of masks, share of mask time and mean time per MASK_CATEGORIES entry, or None
    when the engine does not say which masks were sliced."""
    cats: list[int] = []
    times: list[int] = []
    for r in rs:
        if r.mask_categories and len(r.mask_categories) == len(r.tbm_ns):
            cats.extend(r.mask_categories)
            times.extend(r.tbm_ns)
    if not cats:
        return None
    c = np.asarray(cats)
    t = np.asarray(times, dtype=np.float64) / 1000.0
    total = float(t.sum()) or 1.0
    table = []
    for k, name in enumerate(MASK_CATEGORIES):
        sel = c == k
        if sel.any():
            table.append(
                {
                    "category": name,
                    "masks_share": float(sel.mean()),
                    "time_share": float(t[sel].sum() / total),
                    "us_per_mask": float(t[sel].mean()),
                }
            )
    return table


class EngineStats:
    def __init__(self, engine: str):
        self.engine = engine
        self.description = ""
        self.restarts = 0
        self.results: list[FileResult] = []

    def add(self, r: FileResult) -> None:
        self.results.append(r)

    def timings(self, only: set[str] | None = None) -> dict[str, Any]:
        """Mask and first-mask times over the files named in `only` (all when None)."""
        rs = [r for r in self.results if only is None or r.file in only]
        tbm = np.fromiter((t for r in rs for t in r.tbm_ns), dtype=np.float64) / 1000.0
        ttfm = np.fromiter((t for r in rs for t in r.ttfm_ns), dtype=np.float64) / 1000.0
        return {
            "files": len(rs),
            "masks": int(tbm.size),
            "tbm_avg_us": _stat(tbm, "mean"),
            "tbm_p50_us": _stat(tbm, 50),
            "tbm_p90_us": _stat(tbm, 90),
            "tbm_p99_us": _stat(tbm, 99),
            "tbm_max_us": _stat(tbm, "max"),
            "ttfm_avg_us": _stat(ttfm, "mean"),
            "ttfm_p50_us": _stat(ttfm, 50),
            "ttfm_p90_us": _stat(ttfm, 90),
            "ttfm_p99_us": _stat(ttfm, 99),
            "ttfm_max_us": _stat(ttfm, "max"),
        }

    def summary(self) -> dict[str, Any]:
        rs = self.results
        valid_tokens = sum(r.valid_tokens for r in rs)
        ff_supported = all(r.ff_supported for r in rs)
        ff_forced = sum(r.ff_forced for r in rs)
        ff_calls = sum(r.ff_calls for r in rs)
        ff_bad = sum(r.ff_noncanonical for r in rs)
        compile_reasons = Counter(reason_key(r.reason) for r in rs if r.status == "compile_error")
        error_reasons = Counter(reason_key(r.reason) for r in rs if r.status in ("error", "crash"))
        categories = _category_table(rs)
        out: dict[str, Any] = {
            "mask_categories": categories,
            "files": len(rs),
            "passed": sum(r.passed for r in rs),
            "compile_errors": sum(r.status == "compile_error" for r in rs),
            "accepted_invalid": sum(r.accepted_invalid for r in rs),
            "rejected_valid": sum(r.rejected_valid for r in rs),
            **{k: v for k, v in self.timings().items() if k != "files"},
            "ff_share": _share(ff_forced, valid_tokens) if ff_supported else None,
            "ff_noncanonical": ff_bad if ff_supported else None,
            "ff_canonical_share": _share(ff_forced - ff_bad, valid_tokens) if ff_supported else None,
            "ff_tokens": ff_forced if ff_supported else None,
            "ff_avg_us": (round(sum(r.ff_ns for r in rs) / ff_calls / 1000.0, 2) if ff_calls else None)
            if ff_supported
            else None,
            "tests": sum(r.tests_run for r in rs),
            "valid_tests": sum(r.valid_tests for r in rs),
            "invalid_tests": sum(r.invalid_tests for r in rs),
            "valid_tokens": valid_tokens,
            "timeouts": sum(r.status == "timeout" for r in rs),
            "crashes": sum(r.status == "crash" for r in rs),
            "errors": sum(r.status == "error" for r in rs),
            "mask_mismatches": sum(r.mismatches for r in rs),
            "capped_files": sum(r.tests_total > r.tests_run and r.status == "ok" for r in rs),
            "compile_error_reasons": compile_reasons.most_common(10),
            "error_reasons": error_reasons.most_common(10),
            "timed_out_files": [f"{r.file}: {r.reason}" for r in rs if r.status == "timeout"],
            "failed_files": [
                f"{r.file}: {r.status} {r.reason or '; '.join(r.failures[:2])}".strip()
                for r in rs
                if not r.passed and r.status != "compile_error"
            ],
            "wall_s": round(sum(r.wall_s for r in rs), 2),
            "engine": self.description,
            "worker_restarts": self.restarts,
        }
        if any(r.encode_mismatches for r in rs):
            out["encode_mismatches"] = sum(r.encode_mismatches for r in rs)
        return out


def _share(part: int, whole: int) -> float:
    return round(part / whole, 5) if whole else 0.0


def _stat(values: np.ndarray, what) -> float | None:
    if values.size == 0:
        return None
    if what == "mean":
        v = values.mean()
    elif what == "max":
        v = values.max()
    else:
        v = np.percentile(values, what)
    return round(float(v), 2)


def same_files(stats: dict[str, "EngineStats"]) -> set[str] | None:
    """Names of the files every engine compiled and walked to the end (status ok), or
    None with fewer than two engines. Only there do the engines time the same
    instances: a file one engine refuses to compile gives the other masks that have no
    counterpart."""
    if len(stats) < 2:
        return None
    common: set[str] | None = None
    for s in stats.values():
        ok = {r.file for r in s.results if r.status == "ok"}
        common = ok if common is None else common & ok
    return common
