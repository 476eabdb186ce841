"""core/_measure/http_stream.py against a real loopback server that answers with bytes chosen by the
test, written in pieces that end anywhere (inside a chunk-size line, inside a CRLF)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from core._measure.http_stream import HTTPStreamError, StreamConnection

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENTS = [b"data: one\n\n", b"data: two\n\n", b"data: " + b"x" * 300 + b"\n\n", b"data: [DONE]\n\n"]
CHUNKED_BODY = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\nX-Trailer: t\r\n\r\n"


@contextlib.asynccontextmanager
async def serve(answers: list[list[bytes]], close_after: bool = False):
    """A server answering the n-th request on a connection with ``answers[n]``, one write per
    piece with a pause between (so that the client reads them separately); the requests it
    got are in the yielded list."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for pieces in answers:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            seen.append(head + await reader.readexactly(length))
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.002)
            if close_after:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[k:k + size] for k in range(0, len(data), size)]


async def post(connection: StreamConnection, path: str = "/v1/completions") -> tuple[int, bytes, list[float]]:
    received: list[bytes] = []
    times: list[float] = []
    sent: list[float] = []

    def on_body(data: bytes, now: float) -> None:
        received.append(data)
        times.append(now)

    status = await connection.post(path, b'{"a": 1}', on_body, sent.append)
    assert sent and all(t >= sent[0] for t in times)  # stamped before the first byte came back
    return status, b"".join(received), times


@pytest.mark.parametrize("piece", [1, 3, 7, 64, 10_000])
async def test_chunked_body_in_any_pieces_then_the_connection_is_kept(piece):
    answer = cut(CHUNKED_HEAD + CHUNKED_BODY, piece)
    async with serve([answer, [CHUNKED_HEAD + CHUNKED_BODY]]) as (url, seen):
        connection = StreamConnection(url + "/prefix")
        assert (await post(connection))[:2] == (200, b"".join(EVENTS))
        transport = connection.transport
        assert (await post(connection))[:2] == (200, b"".join(EVENTS))  # the second on the same socket
        assert connection.transport is transport and not connection.closed
        connection.close()
    assert seen[0].startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:") and seen[0].endswith(b'{"a": 1}')


async def test_one_read_is_one_callback_with_one_timestamp():
    async with serve([[CHUNKED_HEAD, CHUNKED_BODY]]) as (url, _):
        connection = StreamConnection(url)
        status, body, times = await post(connection)
    assert (status, body, len(times)) == (200, b"".join(EVENTS), 1)


async def test_content_length_and_until_close_bodies():
    fixed = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\ndata: a\n\n\n"
    async with serve([cut(fixed, 5), [b"HTTP/1.0 200 OK\r\n\r\n", b"data: b\n\n"]], close_after=False) as (url, _):
        connection = StreamConnection(url)
        assert (await post(connection))[:2] == (200, b"data: a\n\n\n")
        assert (await post(connection))[:2] == (200, b"data: b\n\n")  # ended by the server's close
        assert connection.closed


async def test_informational_response_is_skipped_and_an_error_body_kept():
    answer = [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno route\n"]
    async with serve([answer]) as (url, _):
        connection = StreamConnection(url)
        status, body, _ = await post(connection)
    assert (status, body, connection.error_body) == (404, b"", b"no route\n")
    assert connection.closed  # Connection: close


async def test_close_mid_body_and_bad_framing_raise():
    async with serve([[CHUNKED_HEAD, CHUNKED_BODY[:30]]], close_after=True) as (url, _):
        with pytest.raises(HTTPStreamError, match="before the response ended"):
            await post(StreamConnection(url))
    async with serve([[CHUNKED_HEAD, b"zz\r\n"]]) as (url, _):
        with pytest.raises(HTTPStreamError, match="bad chunk size line b'zz'"):
            await post(StreamConnection(url))
    async with serve([[b"SSH-2.0-OpenSSH\r\n\r\n"]]) as (url, _):
        with pytest.raises(HTTPStreamError, match="not an HTTP response"):
            await post(StreamConnection(url))


async def test_an_exception_from_the_callback_ends_the_request_and_the_connection():
    async with serve([[CHUNKED_HEAD, CHUNKED_BODY]]) as (url, _):
        connection = StreamConnection(url)

        def on_body(data: bytes, now: float) -> None:
            raise ValueError("bad event")

        with pytest.raises(ValueError, match="bad event"):
            await connection.post("/", b"{}", on_body)
        assert connection.closed


def test_a_base_url_that_is_not_http_is_refused():
    with pytest.raises(ValueError, match="is not http://HOST:PORT"):
        StreamConnection("127.0.0.1:8000")
