"""The exact-rate server (:class:`core.testing.ExactRateServer`) as a process of its own.

It is the ground truth for the benchmark client: each stream sends its first token
``ttft_ms`` after the request arrives and then one token every ``itl_ms``, each token
scheduled against an absolute deadline so sleeps never accumulate drift. The server records
when every request arrived and when each token actually left (``time.monotonic()``, one
system-wide clock on Linux, so it compares directly with the client's), and serves that
record at ``GET /truth`` (``DELETE /truth`` clears it).

It speaks just enough HTTP/1.1 (keep-alive, chunked responses) over asyncio streams, on
uvloop when installed, so that it keeps its schedule at tens of thousands of tokens per
second where a full web framework would fall behind.

Faults for tests: ``--truncate-at N`` ends each stream after N tokens with
``finish_reason=stop``; ``--drop-at N`` closes the connection after N tokens without
``[DONE]``; ``--exit-at N`` kills the whole server process after N tokens in total.
Other servers' manners: ``--reject-fields ignore_eos,min_tokens`` (HTTP 422, as
``transformers serve``), ``--eos-at N`` (the model stops at N tokens unless the length is
held), ``--no-done`` (streams end cleanly without ``[DONE]``). Answers: ``--answer-prefix P`` (token k
is ``P`` + ``t{k} ``), ``--slow-prompts PATTERN=FACTOR`` (prompts matching the regular
expression get FACTOR times the ITL). ``--profile-dir-env NAME``: vLLM's
profiler endpoints, traces written into the folder that variable names (core.testing's
ExactRateServer).

Run: ``python -m tests.exact_rate_server --port 0 --itl-ms 10``; it prints
``listening on PORT`` once ready.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
from pathlib import Path


def _exact_rate_server_class() -> type:
    """:class:`core.testing.ExactRateServer`, from ``core/testing/fake_engine.py`` loaded on its own:
    that module needs only the standard library, while importing it through ``core`` would
    first run ``core/__init__.py`` (SciPy, ruptures, SQLModel: about 1.5 s of CPU), paid at
    every start of this server and of the fake engine that wraps it."""
    spec = importlib.util.spec_from_file_location(
        "specperf_exact_rate_server", Path(__file__).resolve().parent.parent / "core" / "testing" / "fake_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ExactRateServer


ExactRateServer = _exact_rate_server_class()


def truth_output_tok_s(records: list[dict]) -> float:
    """Aggregate output tok/s as emitted: tokens / (last token sent - first request arrived)."""
    tokens = sum(r["tokens"] for r in records)
    start = min(r["arrival_s"] for r in records)
    end = max(r["last_token_s"] for r in records)
    return tokens / (end - start)


async def _serve(args: argparse.Namespace) -> None:
    slow = args.slow_prompts.rsplit("=", 1) if args.slow_prompts else None
    server = ExactRateServer(args.ttft_ms, args.itl_ms, args.truncate_at, args.drop_at, args.exit_at,
                             tuple(filter(None, args.reject_fields.split(","))), args.eos_at, args.no_done,
                             os.environ.get(args.profile_dir_env) if args.profile_dir_env else None,
                             args.answer_prefix, (slow[0], float(slow[1])) if slow else None)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", args.port, backlog=1024)
    print(f"listening on {listener.sockets[0].getsockname()[1]}", flush=True)
    await listener.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--truncate-at", type=int)
    parser.add_argument("--drop-at", type=int)
    parser.add_argument("--exit-at", type=int)
    parser.add_argument("--reject-fields", default="")
    parser.add_argument("--eos-at", type=int)
    parser.add_argument("--no-done", action="store_true")
    parser.add_argument("--answer-prefix", default="", help="token k of every answer is PREFIX + 't{k} '")
    parser.add_argument("--slow-prompts", help="PATTERN=FACTOR: a prompt matching PATTERN gets FACTOR x the ITL")
    parser.add_argument("--profile-dir-env", help="the variable naming the trace folder: answer the profiler endpoints")
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(parser.parse_args()))
    else:
        uvloop.run(_serve(parser.parse_args()))


if __name__ == "__main__":
    main()
