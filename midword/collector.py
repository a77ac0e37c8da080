"""The garbage collector's settings for a process that computes masks.

Computing masks allocates steadily (derivatives, lexer states, Earley rows and the
caches that keep them) but makes next to no reference cycles: nearly everything is
freed by reference counting or kept for good. With CPython's default thresholds the
collector runs a middle pass every few thousand new containers and full ones often,
each walking the caches the engine has grown, and most of them land inside timed calls,
since that is where the allocating happens.

So after start-up, what was made is frozen out of the collector's view (the model,
tokenizer tables and tries live to the end of the process). A young pass walks each new
container once, whatever the threshold, so the threshold sets the length of one pause,
which lands inside a mask, and not the total: the new containers are mostly cache
entries, tuples of ints whose every item the pass reads, one memory access each, so a
pass is slow per container. Young passes come every thousand containers, short enough
to stay below the slowest masks' own time (docs/optimizations.md). Survivors are
promoted as before, and a middle pass, which walks them all again, comes once per
million new containers; where it would come due soon, an idle moment takes it early
(`collect_when_idle`), so that it does not land inside a mask. The rare cyclic garbage
waits a little longer.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 1_000
# Passes of each generation before the next older one is collected: older passes walk
# every cache the engine has grown, so they stay rare (a middle pass per million new
# containers, 1,000 young passes of 1,000).
OLDER_THRESHOLDS = (1_000, 20)


def settle_after_start() -> None:
    """Collects what start-up left behind, freezes the rest and sets the thresholds above.
    Called once the process has loaded what it keeps (`midword serve` after the model,
    the benches after their warm-up)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)


# How close to due an older pass may be for an idle moment to take it early: a request
# makes fewer young passes than this (about 192,000 new containers), so the pass does
# not come due inside the next one.
YOUNG_PASSES_MARGIN = 192
MIDDLE_PASSES_MARGIN = 2


def collect_when_idle() -> int | None:
    """At an idle moment (the model thread between requests, a benchmark between files),
    takes the older collector pass that is due soon, so that it does not land inside a
    mask: a middle pass walks every container promoted since the last one, tens of
    milliseconds once the caches have grown. Returns the generation collected, or None
    when none was due (or the collector is off)."""
    if not gc.isenabled():
        return None
    _, young_every, middle_every = gc.get_threshold()
    _, young_passes, middle_passes = gc.get_count()
    if middle_every and middle_passes >= middle_every - MIDDLE_PASSES_MARGIN:
        gc.collect(2)
        return 2
    if young_every and young_passes >= young_every - YOUNG_PASSES_MARGIN:
        gc.collect(1)
        return 1
    return None
