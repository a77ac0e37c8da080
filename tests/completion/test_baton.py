"""The engine's lock taken in turn (completion/baton.py): first come, first served, and a
holder that passes it on lets every thread already waiting go first."""

from __future__ import annotations

import threading
import time

import pytest

from midword.completion.baton import Baton


def _wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.001)


def test_waiters_get_the_baton_in_the_order_they_asked():
    baton = Baton()
    order: list[int] = []
    baton.acquire()
    threads = []
    for i in range(5):
        t = threading.Thread(target=lambda i=i: (baton.acquire(), order.append(i), baton.release()))
        t.start()
        threads.append(t)
        _wait_until(lambda i=i: baton.waiting == i + 1)  # each asks after the one before
    baton.release()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4]
    assert not baton.locked() and baton.waiting == 0


def test_a_holder_asking_again_goes_behind_those_already_waiting():
    """A plain lock usually goes back to the thread that let it go; this one does not."""
    baton = Baton()
    order: list[str] = []
    baton.acquire()
    other = threading.Thread(target=lambda: (baton.acquire(), order.append("other"), baton.release()))
    other.start()
    _wait_until(lambda: baton.waiting == 1)
    assert baton.pass_on() is True  # the other one ran in between
    order.append("holder")
    baton.release()
    other.join(10)
    assert order == ["other", "holder"]


def test_passing_on_with_nobody_waiting_keeps_it():
    baton = Baton()
    with baton:
        assert baton.pass_on() is False
        assert baton.locked()
    assert not baton.locked()


def test_releasing_a_baton_nobody_holds_is_an_error():
    with pytest.raises(RuntimeError, match="nobody holds"):
        Baton().release()


def test_a_waiter_interrupted_while_waiting_leaves_the_queue():
    baton = Baton()
    baton.acquire()
    done = threading.Event()

    class Stop(BaseException):
        pass

    original = baton._cond.wait
    calls = {"n": 0}

    def wait_then_fail(*args, **kwargs):
        calls["n"] += 1
        if threading.current_thread().name == "doomed":
            raise Stop
        return original(*args, **kwargs)

    baton._cond.wait = wait_then_fail  # type: ignore[method-assign]

    def doomed():
        try:
            baton.acquire()
        except Stop:
            done.set()

    t = threading.Thread(target=doomed, name="doomed")
    t.start()
    t.join(10)
    assert done.is_set() and baton.waiting == 0
    baton.release()
    assert baton.acquire() and baton.locked()  # nobody left in front
