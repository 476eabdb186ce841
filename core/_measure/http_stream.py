"""One keep-alive HTTP/1.1 connection that POSTs a request and hands the streamed response
body to a callback as it arrives, straight from the event loop's ``data_received``.

It is the benchmark client's transport (core/_measure/client.py). A general client (aiohttp,
httpx) passes every read through a stream reader: a future resolved, a task woken, a read
call returned, per chunk of a token stream. Here the bytes of one socket read are dechunked
and given to the callback in the same call that received them, with one timestamp per read;
the request's task wakes once, when the response has ended. At 8 streams this halved the
client's CPU per token (bench/RESULTS.md).

What it speaks: HTTP/1.1 over TCP (TLS for ``https``), a response body framed by
``Transfer-Encoding: chunked``, ``Content-Length`` or the end of the connection, informational
(1xx) responses skipped, ``Connection: close`` honoured. One request at a time per connection.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

# the body of a response other than 200 is kept up to this many bytes, for the error message
_ERROR_BODY_BYTES = 4096


class HTTPStreamError(ConnectionError):
    """The server broke HTTP/1.1 framing, or closed the connection before the response ended."""


class StreamConnection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection to the server of ``base_url`` (``http://host:port``
    or ``https://...``; its path is not used).

    :meth:`post` sends one request and returns the response's status once the whole body has
    arrived. While it streams, each socket read's body bytes go to ``on_body(data, now_s)``,
    ``now_s`` being ``time.monotonic()`` taken once when the read arrived. An exception from
    ``on_body`` ends the request: :meth:`post` raises it and the connection is closed.

    Raises:
        ValueError: ``base_url`` is not an ``http`` or ``https`` URL with a host.
    """

    def __init__(self, base_url: str) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base URL {base_url!r} is not http://HOST:PORT or https://HOST:PORT; give the engine's URL")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.tls = url.scheme == "https"
        self.host_header = url.netloc.rsplit("@", 1)[-1].encode("idna")
        self.transport: asyncio.Transport | None = None
        self._done: asyncio.Future[int] | None = None
        self._on_body: Callable[[bytes, float], None] = _ignore
        self._reset()

    def _reset(self) -> None:
        self._head = b""  # response head bytes so far, until the blank line
        self.status = 0
        self._framing = ""  # "chunked", "length" or "close", once the head is read
        self._left = 0  # body bytes left: of the current chunk (chunked) or of the body (length)
        self._skip = 0  # bytes to skip: the CRLF after a chunk's data
        self._pending = b""  # an incomplete chunk-size line
        self._trailers = False  # past the last chunk, reading trailer lines until a blank one
        self._keep_alive = True
        self.error_body = b""

    @property
    def closed(self) -> bool:
        """Whether the connection is gone or was never opened (:meth:`post` reopens it)."""
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        """Close the connection at once (``abort``: a response in flight is dropped)."""
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    async def post(self, path: str, body: bytes, on_body: Callable[[bytes, float], None],
                   on_sent: Callable[[float], None] | None = None) -> int:
        """POST ``body`` (JSON) to ``path`` and stream the response body to ``on_body``.

        ``on_sent(now_s)`` is called with ``time.monotonic()`` just before the request is
        written to the socket (after connecting, if the connection had to be opened).

        Returns:
            The response's HTTP status. For a status other than 200 the body is not given to
            ``on_body`` but kept (its first 4 KiB) in :attr:`error_body`.

        Raises:
            OSError: the connection could not be opened or was lost (:class:`HTTPStreamError`
                when the server closed it mid-response or broke the framing).
            Exception: whatever ``on_body`` raised.
        """
        loop = asyncio.get_running_loop()
        if self.closed:
            context = ssl.create_default_context() if self.tls else None
            await loop.create_connection(lambda: self, self.host, self.port, ssl=context)
        self._reset()
        self._on_body = on_body
        self._done = done = loop.create_future()
        head = (b"POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: specperf\r\nAccept: */*\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n") % (path.encode(), self.host_header, len(body))
        if on_sent is not None:
            on_sent(time.monotonic())
        assert self.transport is not None  # set by connection_made
        self.transport.write(head + body)
        try:
            return await done
        finally:
            self._done = None
            self._on_body = _ignore
            if not done.done() or done.cancelled() or done.exception() is not None or not self._keep_alive:
                self.close()  # cancelled (timeout), failed, or the server closes after this response

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass, only alike

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        done = self._done
        if done is None or done.done():
            return
        if self._framing == "close" and exc is None:
            done.set_result(self.status)  # the body ran to the end of the connection
        else:
            done.set_exception(HTTPStreamError(
                f"the server closed the connection before the response ended{f' ({exc})' if exc else ''}"))

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        done = self._done
        if done is None or done.done():
            return  # bytes outside a request (a server talking out of turn): ignored
        try:
            if not self._framing:
                data = self._read_head(data)
                if not self._framing:
                    return
            framing = self._framing
            body = self._dechunk(data) if framing == "chunked" else b"" if framing == "end" else self._take(data)
            if body:
                if self.status == 200:
                    self._on_body(body, now)
                elif len(self.error_body) < _ERROR_BODY_BYTES:
                    self.error_body += body[:_ERROR_BODY_BYTES - len(self.error_body)]
            if self._framing == "end":
                done.set_result(self.status)
        except Exception as exc:  # noqa: BLE001 - the request's task raises it
            done.set_exception(exc)

    # --- response framing ---------------------------------------------------------------------

    def _read_head(self, data: bytes) -> bytes:
        """Consume the response head; the bytes after it (empty while it is incomplete)."""
        head = self._head + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            self._head = head
            return b""
        lines = head[:end].decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        try:
            status = int(rest[:3])
        except ValueError:
            raise HTTPStreamError(f"not an HTTP response: {lines[0][:80]!r}") from None
        if 100 <= status < 200:  # informational: the real response follows
            self._head = b""
            return self._read_head(head[end + 4:])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        self.status = status
        connection = headers.get("connection", "")
        self._keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        if status in (204, 304):
            self._framing = "end"
        elif "chunked" in headers.get("transfer-encoding", ""):
            self._framing = "chunked"
        elif "content-length" in headers:
            self._framing, self._left = "length", int(headers["content-length"])
            if self._left == 0:
                self._framing = "end"
        else:
            self._framing, self._keep_alive = "close", False
        return head[end + 4:]

    def _take(self, data: bytes) -> bytes:
        """Content-Length or until-close framing: the body bytes of ``data``."""
        if self._framing == "length":
            if len(data) >= self._left:
                data, self._left, self._framing = data[:self._left], 0, "end"
            else:
                self._left -= len(data)
        return data

    def _dechunk(self, data: bytes) -> bytes:
        """Chunked framing: the chunk data in ``data``, joined (one piece, usually, a token's
        event, is returned as is)."""
        if self._pending:
            data, self._pending = self._pending + data, b""
        pieces = []
        pos, size = 0, len(data)
        while pos < size:
            if self._left:
                end = min(pos + self._left, size)
                pieces.append(data[pos:end] if pos or end < size else data)
                self._left -= end - pos
                pos = end
            elif self._skip:
                step = min(self._skip, size - pos)
                self._skip -= step
                pos += step
            else:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    self._pending = data[pos:]
                    break
                line = data[pos:eol]
                pos = eol + 2
                if self._trailers:
                    if not line:
                        self._framing = "end"
                        break
                    continue
                try:
                    self._left = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise HTTPStreamError(f"bad chunk size line {line[:40]!r} in the response") from None
                if self._left == 0:
                    self._trailers = True
                else:
                    self._skip = 2
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _ignore(data: bytes, now_s: float) -> None:
    """The body callback between requests."""
