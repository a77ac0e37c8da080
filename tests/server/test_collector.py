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
