"""Runs specperf's benchmark client once (a subprocess of bench/client_accuracy.py) and
prints its figures as JSON, with the CPU time (``time.process_time``) of ``run_workload``."""

import argparse
import json
import time

import uvloop

from core import WorkloadConfig
from core._measure.client import run_workload

parser = argparse.ArgumentParser()
parser.add_argument("--base-url", required=True)
parser.add_argument("--concurrency", type=int, required=True)
parser.add_argument("--requests", type=int, required=True)
parser.add_argument("--output-len", type=int, required=True)
args = parser.parse_args()
workload = WorkloadConfig(output_len=args.output_len, concurrency=args.concurrency, requests=args.requests,
                          warmup_requests=args.concurrency, prompt_words=16)
start = time.process_time()
sample = uvloop.run(run_workload(args.base_url, "tiny", workload))
print(json.dumps({"output_tok_s": sample.output_tok_s, "output_tokens": sample.output_tokens, "valid": sample.valid,
                  "benchmark_cpu_s": time.process_time() - start}))
