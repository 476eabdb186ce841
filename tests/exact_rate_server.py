"""A synthetic OpenAI-compatible streaming server that emits tokens on an exact schedule.

It is the ground truth for the benchmark client: each stream sends its first token
``ttft_ms`` after the request arrives and then one token every ``itl_ms``, each token
scheduled against an absolute deadline so sleeps never accumulate drift. The server records
when every request arrived and when each token actually left (``time.monotonic()``, which
is one system-wide clock on Linux, so it compares directly with the client's), and serves
that record at ``GET /truth``.

Faults for tests: ``--truncate-at N`` ends each stream after N tokens with
``finish_reason=stop``; ``--drop-at N`` closes the connection after N tokens without
``[DONE]``; ``--exit-at N`` kills the whole server process after N tokens in total.

Run: ``python -m tests.exact_rate_server --port 0 --itl-ms 10``; it prints
``listening on PORT`` once ready.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from aiohttp import web


class ExactRateServer:
    def __init__(self, ttft_ms: float, itl_ms: float, truncate_at: int | None,
                 drop_at: int | None, exit_at: int | None) -> None:
        self.ttft_s = ttft_ms / 1000.0
        self.itl_s = itl_ms / 1000.0
        self.truncate_at = truncate_at
        self.drop_at = drop_at
        self.exit_at = exit_at
        self.records: list[dict] = []
        self.tokens_sent = 0

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def truth(self, request: web.Request) -> web.Response:
        if request.method == "DELETE":
            self.records.clear()
            return web.json_response({"cleared": True})
        return web.json_response(self.records)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        max_tokens = int(body.get("max_tokens", 16))
        to_send = max_tokens if self.truncate_at is None else min(max_tokens, self.truncate_at)
        record = {"arrival_s": arrival, "first_token_s": None, "last_token_s": None, "tokens": 0}
        self.records.append(record)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        first_due = arrival + self.ttft_s
        for k in range(to_send):
            delay = first_due + k * self.itl_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.drop_at is not None and k >= self.drop_at:
                request.transport.close()
                return response
            last = k == to_send - 1
            finish = ("length" if to_send == max_tokens else "stop") if last else None
            choice = ({"index": 0, "delta": {"content": f"t{k} "}, "finish_reason": finish} if chat
                      else {"index": 0, "text": f"t{k} ", "finish_reason": finish})
            await response.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
            now = time.monotonic()
            record["first_token_s"] = record["first_token_s"] or now
            record["last_token_s"] = now
            record["tokens"] = k + 1
            self.tokens_sent += 1
            if self.exit_at is not None and self.tokens_sent >= self.exit_at:
                os._exit(17)
        usage = {"prompt_tokens": 8, "completion_tokens": to_send, "total_tokens": 8 + to_send}
        await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_route("*", "/truth", self.truth)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)
        return app


def truth_output_tok_s(records: list[dict]) -> float:
    """Aggregate output tok/s as emitted: tokens / (last token sent - first request arrived)."""
    tokens = sum(r["tokens"] for r in records)
    start = min(r["arrival_s"] for r in records)
    end = max(r["last_token_s"] for r in records)
    return tokens / (end - start)


async def _serve(args: argparse.Namespace) -> None:
    server = ExactRateServer(args.ttft_ms, args.itl_ms, args.truncate_at, args.drop_at, args.exit_at)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"listening on {port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--truncate-at", type=int)
    parser.add_argument("--drop-at", type=int)
    parser.add_argument("--exit-at", type=int)
    asyncio.run(_serve(parser.parse_args()))


if __name__ == "__main__":
    main()
