"""The LSP byte stream: frames in, messages to the protocol, errors answered.

pygls's own read loop trusts the client: a frame whose `Content-Length` is wrong or
missing desynchronises the stream for good, a huge one ends the process with
MemoryError, a request whose params fail validation (or any request after
`shutdown`) is never answered, and over TCP every connection shares one server. This
loop replaces it, over stdio and TCP alike:

- *Framing.* Header lines are bounded (`MAX_HEADER_LINE`); a `Content-Length:` is
  found anywhere in a line, so after a frame with a wrong length the next frame's
  header is found again even when it follows the bad body on the same line. A
  header block without a length, an unreadable length or a body that is not JSON is
  answered with a ParseError (-32700, id null) and reading goes on. A length over
  `MAX_MESSAGE_BYTES` is answered and the session closed: its body can be neither
  held nor skipped safely.
- *Messages.* Not a JSON-RPC 2.0 object: InvalidRequest (-32600). Params that fail
  validation: InvalidParams (-32602) with the request's id. A request after
  `shutdown`: InvalidRequest. `exit` ends the session with code 0 after `shutdown`,
  else 1, as the protocol says.
- *TCP.* One client at a time, each with a fresh server (its own documents,
  settings and model worker, closed when the client leaves); a second connection
  while one is live is answered with an error and closed, never cross-wired; a
  client that disconnects leaves the server listening; an HTTP request line is
  answered `400` and closed.
- *Backpressure (TCP).* Answers a client has not read yet stay in the server's
  memory. Past `WRITE_HIGH_WATER` unread bytes the session stops reading the client's
  input until it reads (asking more would only queue more answers); a client that stays
  stalled for `WRITE_STALL_S`, or whose unread answers reach `MAX_WRITE_BUFFER_BYTES`
  (the server's own notifications go on while input is paused), is dropped with a log
  line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import re
import sys
import threading
from typing import Any, BinaryIO, Callable

log = logging.getLogger(__name__)

MAX_HEADER_LINE = 8 * 1024
# The largest message read: a didOpen carries a whole document (the editor's own limit
# for files it syncs is lower); past this a frame is refused, never allocated.
MAX_MESSAGE_BYTES = 128 * 1024 * 1024

# How long a closing connection's unread input is drained before closing it anyway.
CLOSE_DRAIN_S = 1.0
# TCP backpressure: unread output above which the client's input is no longer read, how
# long it may stay so, and the unread output at which the connection is dropped.
WRITE_HIGH_WATER = 1 << 20
WRITE_STALL_S = 30.0
MAX_WRITE_BUFFER_BYTES = 16 << 20

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

_CONTENT_LENGTH = re.compile(rb"content-length[ \t]*:[ \t]*([^\r\n]*)", re.I)
_HTTP_REQUEST_LINE = re.compile(rb"\A(GET|POST|PUT|HEAD|OPTIONS|DELETE|PATCH|CONNECT|TRACE) \S+ HTTP/\d")
HTTP_REFUSAL = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
HTTP_REFUSAL_TEXT = (
    b"midword: this port speaks the Language Server Protocol (JSON-RPC with Content-Length headers), not HTTP\n"
)


class SessionEnd(Exception):
    """The session must end (the client sent `exit`, or bytes that cannot be framed)."""

    def __init__(self, code: int, reason: str = ""):
        super().__init__(reason)
        self.code = code


def error_frame(code: int, message: str, msg_id: Any = None) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class ThreadReader:
    """Blocking reads of a binary stream (stdin) on one daemon thread, awaited on the
    loop. A daemon thread: a read that never returns must not keep the process alive."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="midword-stdin", daemon=True).start()

    def _serve(self) -> None:
        while True:
            loop, future, fn, args = self._calls.get()
            try:
                result, error = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
                result, error = None, e
            try:
                loop.call_soon_threadsafe(_set, future, result, error)
            except RuntimeError:  # the loop has closed: nobody waits any more
                return

    async def _call(self, fn, *args):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._calls.put((loop, future, fn, args))
        return await future

    async def readline(self) -> bytes:
        return await self._call(self._stream.readline, MAX_HEADER_LINE)

    async def readexactly(self, n: int) -> bytes:
        return await self._call(self._stream.read, n)


def _set(future: asyncio.Future, result, error) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class StreamReader:
    """An asyncio StreamReader with the same bounded `readline`; with the connection's
    `writer`, `wait_writable` holds reading back while the client does not read."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None = None):
        self._reader = reader
        self._writer = writer
        if writer is not None:
            writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    async def wait_writable(self) -> None:
        """Returns when the client has read enough of its answers to be worth reading
        from again; past `WRITE_STALL_S` the connection is dropped and the session ends."""
        writer = self._writer
        if writer is None or writer.is_closing() or writer.transport.get_write_buffer_size() <= WRITE_HIGH_WATER:
            return
        try:
            async with asyncio.timeout(WRITE_STALL_S):
                await writer.drain()
        except TimeoutError:
            log.error(
                "client %s has not read %d bytes of answers for %g s; dropping the connection",
                writer.get_extra_info("peername"),
                writer.transport.get_write_buffer_size(),
                WRITE_STALL_S,
            )
            writer.transport.abort()
            raise SessionEnd(1, "the client stopped reading") from None
        except (ConnectionError, OSError):
            pass  # closed meanwhile: the next read sees the end

    async def readline(self) -> bytes:
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            return e.partial
        except asyncio.LimitOverrunError as e:
            return await self._reader.read(e.consumed or MAX_HEADER_LINE)

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self._reader.readexactly(n)
        except asyncio.IncompleteReadError as e:
            return e.partial


class Session:
    """Reads frames from `reader` into `protocol` (a pygls JsonRPCProtocol whose writer
    is set) until the stream ends or the session must end; returns the exit code."""

    def __init__(self, protocol, reader, send: Callable[[bytes], None], *, on_http: Callable[[], None] | None = None):
        self.protocol = protocol
        self.reader = reader
        self.send = send
        self.on_http = on_http
        self.parse_errors = 0

    async def run(self) -> int:
        wait_writable = getattr(self.reader, "wait_writable", None)
        try:
            while True:
                if wait_writable is not None:
                    await wait_writable()
                body = await self._read_frame()
                if body is None:
                    return 0 if getattr(self.protocol, "_shutdown", False) else 1
                self._dispatch(body)
        except SessionEnd as end:
            return end.code

    async def _read_frame(self) -> bytes | None:
        """The next frame's body; None at the end of the stream."""
        length: int | None = None
        bad_length: bytes | None = None
        seen_header = False
        while True:
            line = await self.reader.readline()
            if not line:
                return None
            if not seen_header and _HTTP_REQUEST_LINE.match(line):
                if self.on_http is not None:
                    self.on_http()
                    raise SessionEnd(1, "an HTTP request on the LSP port")
                self._error(PARSE_ERROR, "expected an LSP header (Content-Length), got an HTTP request line")
                continue
            if line.strip() == b"":
                if not seen_header:
                    continue  # stray blank lines between frames
                break
            seen_header = True
            matches = list(_CONTENT_LENGTH.finditer(line))
            found = matches[-1] if matches else None
            if found is not None:
                value = found.group(1).strip()
                if value.isdigit() and len(value) <= 20:
                    length, bad_length = int(value), None
                else:
                    length, bad_length = None, value[:40]
        if length is None:
            if bad_length is not None:
                self._error(PARSE_ERROR, f"bad Content-Length {bad_length.decode('latin-1')!r}")
            else:
                self._error(PARSE_ERROR, "a message header without Content-Length")
            return b""
        if length > MAX_MESSAGE_BYTES:
            self._error(
                PARSE_ERROR,
                f"Content-Length {length} is over the limit of {MAX_MESSAGE_BYTES} bytes; closing the connection",
            )
            raise SessionEnd(1, "message too large")
        body = await self.reader.readexactly(length)
        if len(body) < length:
            return None  # the stream ended inside the body
        return body

    def _error(self, code: int, message: str, msg_id: Any = None) -> None:
        self.parse_errors += code == PARSE_ERROR
        log.warning("protocol error %s: %s", code, message)
        self.send(error_frame(code, message, msg_id))

    def _dispatch(self, body: bytes) -> None:
        if not body:
            return
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as e:
            self._error(PARSE_ERROR, f"the message is not JSON ({type(e).__name__}: {str(e)[:200]})")
            return
        if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
            self._error(INVALID_REQUEST, "not a JSON-RPC 2.0 message object", _id_of(data))
            return
        if "method" not in data and not ("id" in data and ("result" in data or "error" in data)):
            self._error(INVALID_REQUEST, "neither a request, a notification nor a response", _id_of(data))
            return
        msg_id = data.get("id")
        if "id" in data and (isinstance(msg_id, bool) or not isinstance(msg_id, (int, str, type(None)))):
            self._error(INVALID_REQUEST, "a message id must be an integer or a string")
            return
        method = data.get("method")
        is_request = "id" in data and "method" in data
        if "method" in data and not isinstance(method, str):
            if is_request:
                self._error(INVALID_REQUEST, "a method must be a string", msg_id)
            return
        if "params" in data and data["params"] is not None and not isinstance(data["params"], (dict, list)):
            if is_request:
                self._error(INVALID_REQUEST, "params must be an object or an array", msg_id)
            return
        protocol = self.protocol
        if getattr(protocol, "_shutdown", False) and method not in (None, "exit"):
            if is_request:
                self._error(INVALID_REQUEST, f"{method}: the server is shut down (only exit is accepted)", msg_id)
            return
        if "method" in data and "params" not in data:
            data["params"] = None  # JSON-RPC lets a message leave out params; pygls's types want the field
        try:
            message = protocol.structure_message(data)
        except Exception as e:  # noqa: BLE001 - answered, never fatal
            if is_request:
                self._error(INVALID_PARAMS, f"{method}: invalid params ({_why(e)})", msg_id)
            else:
                log.warning("dropped notification %s with invalid params: %s", method, _short(e))
            return
        try:
            protocol.handle_message(message)
        except Exception as e:  # noqa: BLE001
            log.exception("handling %s failed", method)
            if is_request:
                self._error(-32603, f"{method}: internal error ({type(e).__name__})", msg_id)
        code = getattr(protocol, "exit_code", None)
        if code is not None:
            raise SessionEnd(code, "exit")


def _id_of(data: Any) -> Any:
    if isinstance(data, dict):
        msg_id = data.get("id")
        if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool):
            return msg_id
    return None


def _why(e: BaseException) -> str:
    """What failed validation, as cattrs says where (`... @ $.params.position.line`)."""
    cause = e.__cause__ or e
    try:
        from cattrs import transform_error

        return _short_text("; ".join(transform_error(cause, path="$")))
    except Exception:  # noqa: BLE001 - not a cattrs error: its own message
        return _short(cause)


def _short_text(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


# -- running a server ----------------------------------------------------------------------


class _Writer:
    """The protocol's writer: bytes to a sink; `close` ends the session."""

    def __init__(self, write: Callable[[bytes], None], close: Callable[[], None]):
        self._write = write
        self._close = close

    def write(self, data: bytes) -> None:
        self._write(data)

    def close(self) -> None:
        self._close()


async def _serve_session(
    server, reader, write: Callable[[bytes], None], close: Callable[[], None], *, on_http=None
) -> int:
    protocol = server.protocol
    protocol.set_writer(_Writer(write, close))
    session = Session(protocol, reader, write, on_http=on_http)
    server.session = session
    try:
        return await session.run()
    finally:
        server.end_session()


def serve_stdio(server, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> int:
    """Serve one client over stdin/stdout; the exit code (0 after shutdown and exit)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    lock = threading.Lock()

    def write(data: bytes) -> None:
        with lock:
            stdout.write(data)
            stdout.flush()

    async def main() -> int:
        try:
            return await _serve_session(server, ThreadReader(stdin), write, lambda: None)
        except BrokenPipeError:
            log.error("the client closed the connection")
            return 1

    return asyncio.run(main())


def serve_tcp(
    make_server: Callable[[], Any], host: str, port: int, *, ready: Callable[[tuple], None] | None = None
) -> int:
    """Serve LSP clients on host:port, one at a time, each with a fresh server from
    `make_server()`. Returns when a client sends `exit` (its exit code)."""

    async def main() -> int:
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        live: list[asyncio.StreamWriter] = []

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("peername")
            if live:
                log.warning("refused a second client %s while one is connected", peer)
                writer.write(
                    error_frame(
                        INVALID_REQUEST,
                        "midword: another client is connected to this server; it serves one client at a time",
                    )
                )
                await _close(writer, reader)
                return
            live.append(writer)
            server = None

            def write(data: bytes) -> None:
                if writer.is_closing():
                    return
                unread = writer.transport.get_write_buffer_size()
                if unread + len(data) > MAX_WRITE_BUFFER_BYTES:
                    log.error(
                        "client %s has %d bytes of answers unread (limit %d); dropping the connection",
                        peer,
                        unread,
                        MAX_WRITE_BUFFER_BYTES,
                    )
                    writer.transport.abort()
                    return
                writer.write(data)

            def on_http() -> None:
                writer.write(HTTP_REFUSAL % (len(HTTP_REFUSAL_TEXT), HTTP_REFUSAL_TEXT))

            try:
                server = make_server()
                code = await _serve_session(server, StreamReader(reader, writer), write, lambda: None, on_http=on_http)
            except Exception:  # noqa: BLE001 - one client's failure never ends the server
                log.exception("client %s: session failed", peer)
                code = 1
            finally:
                live.remove(writer)
                await _close(writer, reader)
            log.info("client %s left (code %s)", peer, code)
            if server is not None and getattr(server.protocol, "exit_code", None) is not None and not done.done():
                done.set_result(code)

        tcp = await asyncio.start_server(connection, host, port, limit=MAX_HEADER_LINE * 2)
        if ready is not None:
            ready(tcp.sockets[0].getsockname())
        async with tcp:
            return await done

    return asyncio.run(main())


async def _close(writer: asyncio.StreamWriter, reader: asyncio.StreamReader | None = None) -> None:
    """Close a connection so that what was written arrives: closing with unread input
    would reset it, and the client could lose the answer that says why."""
    try:
        await writer.drain()
        if reader is not None and writer.can_write_eof():
            writer.write_eof()
            async with asyncio.timeout(CLOSE_DRAIN_S):
                while await reader.read(65536):
                    pass
    except (ConnectionError, OSError, TimeoutError):
        pass
    writer.close()
    try:
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass
