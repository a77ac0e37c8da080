"""The garbage collector's settings for a process that computes masks.

Computing masks allocates steadily (derivatives, lexer states, Earley rows and the
caches that keep them) but makes next to no reference cycles: nearly everything is
freed by reference counting or kept for good. With CPython's default thresholds the
collector then runs about a thousand young passes, a hundred middle ones and half a dozen
full ones over a MaskBench run: 0.33 s beside the run's 5.5 s of timed calls, in which
most of them fall, since that is where the allocating happens.

So after start-up, what was made is frozen out of the collector's view (the model,
tokenizer tables and tries live to the end of the process), and a young pass waits for
10,000 new containers instead of 700. A young pass walks each of them once, whatever the
threshold, so the threshold sets the length of one pause, which lands inside a mask:
at 50,000 a pass took the largest masks of a schema with hundreds of object types
(detekt) past a dozen milliseconds, at 10,000 it stays near two. Survivors are promoted
as before, and a middle pass, which walks them all again, still comes once per million
new containers (100 young passes of 10,000). The rare cyclic garbage waits a little
longer.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
# Passes of each generation before the next older one is collected: older passes walk
# every cache the engine has grown, so they stay rare (a middle pass per million new
# containers).
OLDER_THRESHOLDS = (100, 20)


def settle_after_start() -> None:
    """Collects what start-up left behind, freezes the rest and sets the thresholds above.
    Called once the process has loaded what it keeps (`midword serve` after the model,
    the benches after their warm-up)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
