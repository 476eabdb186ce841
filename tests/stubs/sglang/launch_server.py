"""A stand-in for ``python -m sglang.launch_server`` (SGLang needs a GPU build we cannot run).

It answers SGLang's endpoints the way FIELD_NOTES section 2 records them:
``/health_generate`` is 503 for the first ``STUB_STARTUP_S`` seconds, then 200;
``/v1/completions`` streams at an exact rate (the exact-rate server); ``/metrics`` carries
``sglang:spec_accept_length`` per TP rank. While streams are active it prints scheduler
'Decode batch' lines every 0.2 s with accept len 2.50; the first line after idle reports
accept len 9.99 and 0.05 tok/s, as the real first line after idle is bogus, so a reader that
fails to drop it is caught. With ``STUB_SPEC_VERIFY_CT=N`` each request's usage carries
``spec_verify_ct: N``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from core.testing import ExactRateServer

METRICS = """# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="m",tp_rank="0",dp_rank="0"} 3.0
sglang:spec_accept_length{model_name="m",tp_rank="1",dp_rank="0"} 3.5
"""


class SglangStub(ExactRateServer):
    def __init__(self, startup_s: float) -> None:
        super().__init__(ttft_ms=5.0, itl_ms=2.0)
        self.ready_at = time.monotonic() + startup_s
        self.active = 0
        if "STUB_SPEC_VERIFY_CT" in os.environ:
            self.extra_usage = {"spec_verify_ct": int(os.environ["STUB_SPEC_VERIFY_CT"])}

    async def route(self, method, path, body, arrival, writer) -> bool:
        if path == "/health_generate":
            ready = time.monotonic() >= self.ready_at
            self._json(writer, "200 OK" if ready else "503 Service Unavailable", {"ready": ready})
            await writer.drain()
            return True
        if path == "/metrics":
            body = METRICS.encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            return True
        return await super().route(method, path, body, arrival, writer)

    async def stream(self, body, chat, arrival, writer) -> bool:
        self.active += 1
        try:
            return await super().stream(body, chat, arrival, writer)
        finally:
            self.active -= 1

    async def decode_log(self) -> None:
        idle = True
        while True:
            await asyncio.sleep(0.2)
            if not self.active:
                idle = True
                continue
            accept, tput = (9.99, 0.05) if idle else (2.50, 180.0)
            idle = False
            print(f"[2026-11-30 10:00:00 TP0] Decode batch. #running-req: {self.active}, #token: 186, "
                  f"token usage: 0.00, accept len: {accept:.2f}, accept rate: 0.49, cuda graph: True, "
                  f"gen throughput (token/s): {tput:.2f}, #queue-req: 0,", flush=True)


async def serve(args: argparse.Namespace) -> None:
    stub = SglangStub(float(os.environ.get("STUB_STARTUP_S", "1.0")))
    listener = await asyncio.start_server(stub.handle, args.host, args.port)
    print(f"stub sglang serving {args.model_path} on {args.port}", flush=True)
    asyncio.get_running_loop().create_task(stub.decode_log())
    await listener.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    asyncio.run(serve(args))
