"""The collector policy of mask-computing processes (midword.collector), each case in a
fresh interpreter so pytest's own collector settings stay as they are."""

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_settling_freezes_what_start_up_made_and_raises_the_young_threshold():
    out = _run("""
        import gc
        from midword.collector import settle_after_start, YOUNG_THRESHOLD, OLDER_THRESHOLDS
        kept = [[i] for i in range(20_000)]
        settle_after_start()
        assert gc.get_freeze_count() >= 20_000, gc.get_freeze_count()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
        # The frozen objects are out of every pass: a full collection walks none of them.
        assert gc.collect() == 0
        print("ok")
    """)
    assert out == "ok"


def test_cycles_made_after_settling_are_still_collected_without_an_explicit_call():
    out = _run("""
        import gc, weakref
        from midword.collector import settle_after_start, YOUNG_THRESHOLD
        settle_after_start()
        class Node:
            pass
        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        del a, b
        assert alive() is not None  # reference counting alone cannot free a cycle
        churn = []
        for i in range(2 * YOUNG_THRESHOLD):
            churn.append([i])  # new containers, as mask computation makes
        print("collected" if alive() is None else "leaked")
    """)
    assert out == "collected"


def test_an_idle_moment_takes_an_older_pass_only_when_it_is_due_soon():
    out = _run("""
        import gc
        from midword.collector import (
            settle_after_start, collect_when_idle, OLDER_THRESHOLDS, YOUNG_PASSES_MARGIN, MIDDLE_PASSES_MARGIN,
        )
        settle_after_start()
        young_every, middle_every = OLDER_THRESHOLDS
        # Far from due: nothing runs, the counts stay.
        for _ in range(3):
            gc.collect(0)
        assert collect_when_idle() is None
        assert gc.get_count()[1] == 3, gc.get_count()
        # Due soon: the middle pass runs now, and the count of young passes starts over.
        for _ in range(young_every - YOUNG_PASSES_MARGIN - 3):
            gc.collect(0)
        assert collect_when_idle() == 1
        assert gc.get_count()[1] == 0, gc.get_count()
        # A full pass due soon goes first.
        for _ in range(middle_every - MIDDLE_PASSES_MARGIN - 1):
            gc.collect(1)
        assert collect_when_idle() == 2
        assert gc.get_count()[2] == 0, gc.get_count()
        gc.disable()
        for _ in range(young_every):
            gc.collect(0)
        assert collect_when_idle() is None  # the collector is off: left alone
        print("ok")
    """)
    assert out == "ok"
