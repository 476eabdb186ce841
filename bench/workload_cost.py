"""Benchmark: what prompt sets, natural length and kept answers cost the client (issues 37, 38).

Side by side in one run, against the exact-rate server (tests/exact_rate_server.py, on CPU 1;
the client on CPU 0), specperf's client CPU seconds per 1,000 streamed tokens (``run_workload``'s
``time.process_time``, the difference between runs of 2N and N measured requests over their
token difference, so fixed costs cancel: as bench/client_accuracy.py) for:

* ``before``: specperf as it was before prompt sets (the tree at ``--before``, default d7342ec,
  checked out into a temporary git worktree): random words, fixed length, no text kept;
* ``random-words``: this tree, the same workload (the cost of keeping every answer's text);
* ``categories``: this tree, the built-in prompt set through the chat API, natural length.

Also the stored size of one measured request (``Trial.requests``) with and without its text.
Target (issue 37): ``categories`` no more than 1.1x ``before``.

Run: ``.venv/bin/python -m bench.workload_cost``; results go to bench/WORKLOAD_COST_RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.client_accuracy import ROOT, cpu_model


def client(tree: Path, base_url: str, c: int, n: int, output_len: int, extra: list[str]) -> dict:
    result = subprocess.run(
        ["taskset", "-c", "0", sys.executable, str(ROOT / "bench/_specperf_client.py"), "--base-url", base_url,
         "--concurrency", str(c), "--requests", str(n), "--output-len", str(output_len), *extra],
        capture_output=True, text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["valid"], data
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="d7342ec")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    server = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-m", "tests.exact_rate_server", "--port", "0",
                               "--itl-ms", "5", "--ttft-ms", "20"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{server.stdout.readline().split()[-1]}"
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(before), args.before],
                       check=True)
        cases = {"before": (before, []), "random-words": (ROOT, []),
                 "categories": (ROOT, ["--prompts", "categories", "--output", "natural", "--api", "chat"])}
        c, n = args.concurrency, 3 * args.concurrency
        per_1k: dict[str, list[float]] = {name: [] for name in cases}
        sizes = {}
        try:
            for _ in range(args.repeats):  # the cases interleaved, so drift hits them alike
                for name, (tree, extra) in cases.items():
                    one, two = (client(tree, base_url, c, k, args.output_len, extra) for k in (n, 2 * n))
                    per_1k[name].append(1000 * (two["benchmark_cpu_s"] - one["benchmark_cpu_s"])
                                        / (two["output_tokens"] - one["output_tokens"]))
                    sizes[name] = (two["request_bytes"], two["request_bytes_without_text"])
                    time.sleep(0.5)
        finally:
            server.kill()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)
    median = {name: sorted(v)[len(v) // 2] for name, v in per_1k.items()}
    print(json.dumps({
        "machine": f"{os.cpu_count()} CPUs {cpu_model()}", "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "load_avg_before": load_before, "load_avg_after": os.getloadavg(), "concurrency": c,
        "output_len": args.output_len, "cpu_s_per_1k_tok": per_1k, "median": median,
        "ratio_to_before": {name: round(m / median["before"], 3) for name, m in median.items()},
        "stored_bytes_per_request": sizes}, indent=1))


if __name__ == "__main__":
    main()
