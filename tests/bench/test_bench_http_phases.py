"""The per-phase breakdown of `midword bench http` (midword/bench/http.py `PHASES`): the
server names where a model run's time went in its Server-Timing header, the bench reads
every part back and summarises each phase over the runs."""

from __future__ import annotations

import asyncio

import pytest

from midword.bench.http import PHASES, _phases, _server_timing


def test_server_timing_parts_with_hyphens_are_read():
    got = _server_timing("queue;dur=1.5, engine;dur=20.250, wait-lock;dur=3.000, wait-window;dur=0.5")
    assert got == {"queue": 1.5, "engine": 20.25, "wait-lock": 3.0, "wait-window": 0.5}


def test_phases_summarise_only_the_runs_that_name_them():
    records = [{"phases": {"prefill": float(v), "send": 0.0}} for v in range(1, 101)] + [{"phases": {"cpc": 7.0}}]
    got = _phases(records)
    assert list(got) == ["send", "prefill", "cpc"]  # in PHASES order
    assert got["prefill"] == {"p50": pytest.approx(50.5, abs=0.6), "p95": pytest.approx(95, abs=1), "mean": 50.5}
    assert got["cpc"]["p50"] == 7.0 and set(got) <= set(PHASES)


@pytest.mark.asyncio
async def test_a_model_answer_names_its_phases():
    pytest.importorskip("uvicorn")
    from fake_engine import fake_http_server

    from midword.bench.http import _LeanHttp

    async with fake_http_server() as port:
        body = {"input_prefix": "def f(x):\n    return x.", "input_suffix": "\n", "prompt": "    return x."}
        async with _LeanHttp(timeout=60) as http:
            while True:  # (the fake model loads in the background)
                r = await http.post(f"http://127.0.0.1:{port}/infill", json=body)
                if r.status_code != 503:
                    break
                await asyncio.sleep(0.05)
        assert r.status_code == 200, r.text
        timing = _server_timing(r.headers.get("server-timing"))
        assert {"queue", "engine", "prefill", "cpc", "decode", "mask", "total"} <= set(timing), timing
