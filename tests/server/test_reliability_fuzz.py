"""Fuzzing the server (issue 31): random JSON-RPC messages and framing faults fed to the
server's read loop in process (with the fake engine, tests/fake_engine.py), and random
edit sequences applied to a `Document` checked against a plain reference model of
the text.

Properties: no exception escapes the read loop; every request sent in a well-formed
frame is answered exactly once (a result or an error); after any framing fault the
stream recovers for the frames that follow; and a document's text and line index
after any edits equal the reference's."""

from __future__ import annotations

import asyncio
import json
import re

from fake_engine import FakeEngine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsp_frames import INITIALIZE_FAKE, INITIALIZED, frame
from lsprotocol import types
from pygls.workspace import PositionCodec

from midword.server.documents import Document, scrub
from midword.server.lsp import create_server
from midword.server.positions import LineIndex
from midword.server.transport import MAX_HEADER_LINE, Session

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- a reference text model ------------------------------------------------------------------

_EOL = re.compile(r"\r\n|\r|\n")


def _units(ch: str, encoding: str) -> int:
    if encoding == "utf-32":
        return 1
    if encoding == "utf-16":
        return 2 if ord(ch) > 0xFFFF else 1
    return len(ch.encode("utf-8", "surrogatepass"))


def reference_offset(text: str, line: int, character: int, encoding: str) -> int:
    """An LSP position's offset, the slow obvious way."""
    lines = []
    at = 0
    for m in _EOL.finditer(text):
        lines.append((at, m.start()))
        at = m.end()
    lines.append((at, len(text)))
    if line < 0:
        return 0
    if line >= len(lines):
        return len(text)
    start, end = lines[line]
    units = 0
    for i in range(start, end):
        if units >= character:
            return i
        w = _units(text[i], encoding)
        if units + w > character:
            return i  # inside a character: its start
        units += w
    return end


TEXT = st.lists(st.sampled_from(list("ab \t\r\n{}é中") + ["\r\n", "😀", "\u2028", "\f", "\x85"]), max_size=30).map(
    "".join
)


@st.composite
def edits(draw):
    out = []
    for _ in range(draw(st.integers(1, 12))):
        pos = [draw(st.integers(-1, 8)) for _ in range(4)]
        out.append((pos, draw(TEXT)))
    return out


@FUZZ
@given(start=TEXT, changes=edits(), encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_random_edits_match_the_reference(start, changes, encoding):
    doc = Document("file:///f.txt", source=start, version=1, position_codec=PositionCodec(encoding=encoding))
    text = start
    for (l1, c1, l2, c2), inserted in changes:
        # lsprotocol refuses negative positions: clamp as a client's validation would
        l1, c1, l2, c2 = (max(0, v) for v in (l1, c1, l2, c2))
        a = reference_offset(text, l1, c1, encoding)
        b = reference_offset(text, l2, c2, encoding)
        a, b = min(a, b), max(a, b)
        text = text[:a] + inserted + text[b:]
        doc.apply_change(
            types.TextDocumentContentChangePartial(
                range=types.Range(
                    start=types.Position(line=l1, character=c1), end=types.Position(line=l2, character=c2)
                ),
                text=inserted,
            )
        )
        assert doc.source == text
        assert doc.index.starts == LineIndex(text).starts
    for line in range(-1, len(LineIndex(text).starts) + 1):
        for character in (0, 1, 2, 5, 100):
            assert doc.offset_of(types.Position(line=max(0, line), character=character)) == reference_offset(
                text, max(0, line), character, encoding
            )


@given(st.text(alphabet=st.sampled_from(["a", "\ud800", "\udfff", "é", "😀"]), max_size=20))
def test_scrub_keeps_every_offset(text):
    out = scrub(text)
    assert len(out) == len(text)
    out.encode("utf-8")  # raises on a surrogate left behind
    assert len(out.encode("utf-16-le")) == len(text.encode("utf-16-le", "surrogatepass"))


# -- the read loop, in process ---------------------------------------------------------------


class BytesReader:
    """The transport's reader over a fixed byte string. At its end it waits (a little)
    for the answers still due before reporting the end of the stream."""

    def __init__(self, data: bytes, done):
        self.data = data
        self.at = 0
        self.done = done

    async def readline(self) -> bytes:
        if self.at >= len(self.data):
            return await self._end()
        nl = self.data.find(b"\n", self.at, self.at + MAX_HEADER_LINE)
        stop = nl + 1 if nl >= 0 else min(len(self.data), self.at + MAX_HEADER_LINE)
        out, self.at = self.data[self.at : stop], stop
        return out

    async def readexactly(self, n: int) -> bytes:
        out = self.data[self.at : self.at + n]
        self.at += len(out)
        if len(out) < n:
            await self._end()
        return out

    async def _end(self) -> bytes:
        for _ in range(2000):
            if self.done():
                break
            await asyncio.sleep(0.005)
        return b""


def parse_frames(data: bytes) -> list[dict]:
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        out.append(json.loads(rest[:length]))
        data = rest[length:]
    return out


def run_stream(data: bytes, expected_ids: set) -> list[dict]:
    """Feeds `data` to a fresh server's read loop; the messages it wrote."""
    server = create_server(lambda **kw: FakeEngine(**kw))
    written: list[bytes] = []

    def answered() -> set:
        return {m.get("id") for m in parse_frames(b"".join(written)) if "method" not in m}

    class Writer:
        def write(self, chunk: bytes) -> None:
            written.append(chunk)

        def close(self) -> None:
            pass

    async def main() -> int:
        server.protocol.set_writer(Writer())
        session = Session(server.protocol, BytesReader(data, lambda: expected_ids <= answered()), Writer().write)
        try:
            return await session.run()
        finally:
            server.end_session()

    asyncio.run(main())
    return parse_frames(b"".join(written))


INIT = [
    INITIALIZE_FAKE,
    INITIALIZED,
    {
        "jsonrpc": "2.0",
        "method": "textDocument/didOpen",
        "params": {
            "textDocument": {
                "uri": "file:///w/a.py",
                "languageId": "python",
                "version": 1,
                "text": "alpha = 1\nbeta = al\r\nal",
            }
        },
    },
]

JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
POSITION = st.fixed_dictionaries(
    {"line": st.integers(-3, 5) | JSON_VALUE, "character": st.integers(-3, 40) | JSON_VALUE}
)
METHODS = [
    "textDocument/completion",
    "textDocument/inlineCompletion",
    "midword/stats",
    "no/such/method",
    "textDocument/hover",
    "workspace/didChangeConfiguration",
    "textDocument/didChange",
    "$/cancelRequest",
]


@st.composite
def message(draw, msg_id):
    method = draw(st.sampled_from(METHODS))
    kind = draw(st.sampled_from(["good", "params", "junk"]))
    if kind == "good":
        params = {
            "textDocument": {
                "uri": draw(st.sampled_from(["file:///w/a.py", "file:///w/none.py"])),
                "version": draw(st.integers(0, 5)),
            },
            "position": draw(POSITION),
        }
        if method == "textDocument/didChange":
            params["contentChanges"] = [
                {"range": {"start": draw(POSITION), "end": draw(POSITION)}, "text": draw(st.text(max_size=5))}
            ]
        if method == "workspace/didChangeConfiguration":
            params = {"settings": {"midword": {"maxTokens": draw(JSON_VALUE), "timeBudgetMs": draw(JSON_VALUE)}}}
        if method == "$/cancelRequest":
            params = {"id": draw(st.integers(0, 5))}
    elif kind == "params":
        params = draw(JSON_VALUE)
    else:
        params = draw(st.lists(st.integers(), max_size=3))
    out = {"jsonrpc": "2.0", "method": method, "params": params}
    if method not in ("textDocument/didChange", "workspace/didChangeConfiguration", "$/cancelRequest"):
        out["id"] = msg_id
    if draw(st.booleans()) and "params" in out and kind != "good":
        del out["params"]
    return out


@FUZZ
@given(st.data())
def test_random_messages_are_each_answered_once(data):
    count = data.draw(st.integers(1, 12))
    messages = [data.draw(message(f"r{i}")) for i in range(count)]
    junk = data.draw(st.lists(st.sampled_from([b"{not json", b"[]", b"7", b'{"jsonrpc": "2.0"}', b'"x"']), max_size=3))
    stream = b"".join(frame(m) for m in INIT) + b"".join(frame(m) for m in messages) + b"".join(frame(j) for j in junk)
    stream += frame({"jsonrpc": "2.0", "id": "last", "method": "midword/stats", "params": {}})
    ids = {m["id"] for m in messages if "id" in m} | {"init", "last"}
    replies = run_stream(stream, ids)
    answers = [m for m in replies if "method" not in m]
    by_id = {}
    for a in answers:
        assert ("result" in a) != ("error" in a), a
        by_id.setdefault(a["id"], []).append(a)
    for msg_id in ids:
        assert len(by_id.get(msg_id, [])) == 1, (msg_id, by_id.get(msg_id), messages)
    assert len(by_id.get(None, [])) == len(junk)  # junk frames: one error each


FAULTS = st.sampled_from(["short", "long", "missing", "bad", "garbage", "http", "blank", "huge-header"])


def faulty(fault: str, n: int) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": f"bad{n}", "method": "midword/stats", "params": {}}).encode()
    if fault == "short":
        return b"Content-Length: %d\r\n\r\n" % (len(body) - 7) + body
    if fault == "long":
        return b"Content-Length: %d\r\n\r\n" % (len(body) + 25) + body
    if fault == "missing":
        return b"Content-Type: x\r\n\r\n" + body + b"\r\n"
    if fault == "bad":
        return b"Content-Length: -3\r\n\r\n" + body + b"\r\n"
    if fault == "garbage":
        return b"\x00\xff garbage\r\n" + body + b"\r\n"
    if fault == "http":
        return b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    if fault == "blank":
        return b"\r\n\r\n"
    return b"X-Long: " + b"a" * (MAX_HEADER_LINE * 2) + b"\r\n\r\n"


@FUZZ
@given(st.lists(FAULTS, min_size=1, max_size=6))
def test_framing_faults_never_lose_the_stream(faults):
    stream = b"".join(frame(m) for m in INIT)
    good = []
    for n, fault in enumerate(faults):
        stream += faulty(fault, n)
        # a too-long frame eats up to 25 bytes of what follows: blank lines absorb it
        stream += b"\r\n" * 20
        good.append(f"good{n}")
        stream += frame({"jsonrpc": "2.0", "id": f"good{n}", "method": "midword/stats", "params": {}})
    replies = run_stream(stream, set(good) | {"init"})
    answered = {m.get("id") for m in replies if "method" not in m and "result" in m}
    assert set(good) <= answered, (faults, answered)


def test_notification_futures_do_not_pile_up():
    """pygls keeps a future per notification under an id nothing removes; a session of
    thousands of keystrokes must not keep them all (found by `midword bench soak`)."""
    server = create_server(lambda **kw: FakeEngine(**kw))
    stream = b"".join(frame(m) for m in INIT)
    for version in range(2, 1500):
        stream += frame(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didChange",
                "params": {
                    "textDocument": {"uri": "file:///w/a.py", "version": version},
                    "contentChanges": [
                        {
                            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                            "text": "x",
                        }
                    ],
                },
            }
        )
    stream += frame({"jsonrpc": "2.0", "id": "last", "method": "midword/stats", "params": {}})
    written = []

    class Writer:
        def write(self, chunk):
            written.append(chunk)

        def close(self):
            pass

    async def main():
        server.protocol.set_writer(Writer())
        done = lambda: any(m.get("id") == "last" for m in parse_frames(b"".join(written)))  # noqa: E731
        await Session(server.protocol, BytesReader(stream, done), Writer().write).run()
        pending = len(server.protocol._request_futures)
        server.end_session()
        return pending

    assert asyncio.run(main()) <= 300
