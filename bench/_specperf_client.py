"""Runs specperf's benchmark client once (a subprocess of bench/client_accuracy.py and
bench/workload_cost.py) and prints its figures as JSON, with the CPU time
(``time.process_time``) of ``run_workload``. ``--prompts``, ``--output`` and ``--api`` are
passed on only when given, so the script also drives a specperf from before they existed
(bench/workload_cost.py runs it against an older tree on ``PYTHONPATH``); ``request_bytes``:
the JSON size of what is stored per measured request, with and without the answer text (where
this specperf keeps it)."""

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
parser.add_argument("--prompts")
parser.add_argument("--output")
parser.add_argument("--api")
args = parser.parse_args()
extra = {key: value for key in ("prompts", "output", "api") if (value := getattr(args, key))}
workload = WorkloadConfig(output_len=args.output_len, concurrency=args.concurrency, requests=args.requests,
                          warmup_requests=args.concurrency, prompt_words=16, **extra, **({"mix": "file"} if extra else {}))
start = time.process_time()
sample = uvloop.run(run_workload(args.base_url, "tiny", workload))
cpu_s = time.process_time() - start
stored = [{"ttft_ms": r.ttft_ms, "e2e_ms": r.e2e_ms, "tpot_ms": r.tpot_ms, "output_tokens": r.output_tokens,
           **({"category": r.category, "text": r.text, "finish_reason": r.finish_reason,
               "spec_verify_ct": r.spec_verify_ct} if hasattr(r, "text") else {})} for r in sample.requests]
without = [{k: v for k, v in r.items() if k != "text"} for r in stored]
print(json.dumps({"output_tok_s": sample.output_tok_s, "output_tokens": sample.output_tokens, "valid": sample.valid,
                  "benchmark_cpu_s": cpu_s, "request_bytes": len(json.dumps(stored)) / len(stored),
                  "request_bytes_without_text": len(json.dumps(without)) / len(without)}))
