"""The bench's lean HTTP client (midword/bench/http.py `_read_response`, `_LeanHttp`):
responses with a length, chunked or ended by close, and keep-alive reuse against a real
uvicorn serving the HTTP API with the fake engine."""

from __future__ import annotations

import asyncio

import pytest

from midword.bench.http import _LeanHttp, _read_response


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


@pytest.mark.asyncio
async def test_responses_by_length_chunks_and_close():
    r, keep = await _read_response(_reader(b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\nX-A: b\r\n\r\n{"a": true}'))
    assert (r.status_code, r.json(), r.headers["x-a"], keep) == (200, {"a": True}, "b", True)
    chunked = b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n"
    r, keep = await _read_response(_reader(chunked))
    assert (r.status_code, r.text, keep) == (503, "abcde", True)
    r, keep = await _read_response(_reader(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nrest"))
    assert (r.text, keep) == ("rest", False)
    with pytest.raises(ConnectionError):
        await _read_response(_reader(b""))


@pytest.mark.asyncio
async def test_keep_alive_against_the_server():
    pytest.importorskip("uvicorn")
    from fake_engine import fake_http_server

    async with fake_http_server() as port:
        url = f"http://127.0.0.1:{port}/infill"
        async with _LeanHttp(timeout=30) as http:
            bad = await http.post(url, json={"input_prefix": "x"})  # no input_suffix
            assert bad.status_code == 400 and "input_suffix" in bad.text
            warm = await http.post(url, json={"input_prefix": "", "input_suffix": "", "n_predict": 0})
            assert warm.status_code == 200 and warm.json()["content"] == ""
            assert len(http._idle[("127.0.0.1", port)]) == 1  # one connection, reused
