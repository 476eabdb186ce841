"""Benchmark: specperf's client against vLLM's own (``vllm bench serve``), side by side.

Both clients stream from the exact-rate server (tests/exact_rate_server.py), whose record of
when each token actually left is the truth. For each concurrency, each client runs twice,
with N and 2N measured requests (N = 3 x concurrency, 6 x below 16 streams so that the CPU
difference is not lost in noise; warm-up = concurrency requests). Reported per client:

* throughput error: measured output tok/s / truth - 1, where truth is the server's
  tokens / (first measured request arrived .. last token sent);
* CPU seconds per 1,000 streamed tokens: the client process's CPU time (all its threads,
  ``time.process_time``) spent inside the benchmark coroutine (specperf's ``run_workload``,
  vLLM's ``vllm.benchmarks.serve.benchmark``: warm-up and measured requests, no imports or
  tokenizer loading), difference between the 2N and N runs over the token difference, so
  fixed costs (the warm-up, vLLM's initial test request) cancel out.

The server runs on CPU 1 and the clients on CPU 0 (taskset), so they do not share a core.
The machine (CPU count and model), date and load average before and after are printed with
the rows: on a shared machine the load says how far to trust the figures.

Run: ``.venv/bin/python -m bench.client_accuracy`` (needs scripts/setup-test-engine for the
engine venv that holds vLLM's client, and the tokenizer of the test model).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.exact_rate_server import truth_output_tok_s

ROOT = Path(__file__).resolve().parent.parent
TESTENV = Path(os.environ.get("SPECPERF_TESTENV", Path.home() / ".cache/specperf/testenv"))
# vLLM's benchmark CLI, with the CPU time of its benchmark coroutine printed as the last line.
VLLM_MAIN = (
    "import argparse, json, sys, time\n"
    "import vllm.benchmarks.serve as serve\n"
    "inner = serve.benchmark\n"
    "async def timed(*args, **kwargs):\n"
    "    start = time.process_time()\n"
    "    result = await inner(*args, **kwargs)\n"
    "    timed.cpu_s = time.process_time() - start\n"
    "    return result\n"
    "serve.benchmark = timed\n"
    "p = argparse.ArgumentParser(); serve.add_cli_args(p); serve.main(p.parse_args(sys.argv[1:]))\n"
    "print(json.dumps({'benchmark_cpu_s': timed.cpu_s}))\n"
)


def run_child(argv: list[str]) -> dict:
    """Run ``argv`` to completion; the JSON object on the last line of its output."""
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def specperf_client(base_url: str, c: int, n: int, output_len: int) -> tuple[float, float, int]:
    data = run_child(["taskset", "-c", "0", sys.executable, "-m", "bench._specperf_client",
                      "--base-url", base_url, "--concurrency", str(c), "--requests", str(n),
                      "--output-len", str(output_len)])
    assert data["valid"]
    return data["benchmark_cpu_s"], data["output_tok_s"], data["output_tokens"]


def vllm_client(base_url: str, c: int, n: int, output_len: int) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        cpu = run_child([
            "taskset", "-c", "0", str(TESTENV / "engine-venv/bin/python"), "-c", VLLM_MAIN,
            "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", "tiny", "--tokenizer", str(TESTENV / "models/target"),
            "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", str(output_len),
            "--num-prompts", str(n), "--max-concurrency", str(c), "--num-warmups", str(c),
            "--ignore-eos", "--disable-tqdm", "--save-result", "--result-dir", tmp, "--result-filename", "r.json",
        ])["benchmark_cpu_s"]
        data = json.loads((Path(tmp) / "r.json").read_text())
    return cpu, data["output_throughput"], data["total_output_tokens"]


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), or the architecture."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def truth(base_url: str, n: int) -> float:
    records = sorted(httpx.get(f"{base_url}/truth").json(), key=lambda r: r["arrival_s"])
    return truth_output_tok_s(records[-n:])  # the measured requests: the last n to arrive


def main() -> None:
    parser = argparse.ArgumentParser(description="specperf's client vs vllm bench serve")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64, 100, 128, 256])
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--output-len", type=int, default=128)
    args = parser.parse_args()
    server = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "-m", "tests.exact_rate_server", "--port", "0",
         "--itl-ms", str(args.itl_ms), "--ttft-ms", "20"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    base_url = f"http://127.0.0.1:{server.stdout.readline().split()[-1]}"
    rows = []
    load_before = os.getloadavg()
    try:
        for c in args.concurrency:
            n = 3 * c if c >= 16 else 6 * c
            row = {"concurrency": c, "nominal_tok_s": c * 1000 / args.itl_ms}
            for name, client in (("specperf", specperf_client), ("vllm", vllm_client)):
                errors, cpu_tok = [], []
                for requests in (n, 2 * n):
                    httpx.delete(f"{base_url}/truth")
                    cpu, measured, tokens = client(base_url, c, requests, args.output_len)
                    errors.append(measured / truth(base_url, requests) - 1)
                    cpu_tok.append((cpu, tokens))
                    time.sleep(0.5)
                (cpu1, tok1), (cpu2, tok2) = cpu_tok
                row[f"{name}_error_pct"] = [round(100 * e, 3) for e in errors]
                row[f"{name}_cpu_s_per_1k_tok"] = round(1000 * (cpu2 - cpu1) / (tok2 - tok1), 4)
                row["truth_tok_s"] = round(truth(base_url, 2 * n), 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        server.kill()
    print(json.dumps({"machine": f"{platform.node()} {os.cpu_count()} CPUs {cpu_model()}",
                      "date": time.strftime("%Y-%m-%d %H:%M %Z"), "load_avg_before": load_before,
                      "load_avg_after": os.getloadavg(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
