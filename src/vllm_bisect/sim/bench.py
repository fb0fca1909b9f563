"""``vllm bench serve`` for the simulator's synthetic vLLM (the subset vllm-bisect uses).

Drives a running server with the closed-loop load generator and writes the result file in
vLLM 0.25.1's ``--save-result`` format (the keys of tests/fixtures/vllm-0.25.1-bench), so the
``vllm bench serve`` probe runs end to end without a GPU. Dataset flags are accepted and
ignored (prompts are the probe's default).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from vllm_bisect.probes.load import LoadProbe
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import LoadSpec, ProbeSpec


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="vllm bench serve")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-concurrency", type=int, default=4)
    ap.add_argument("--random-output-len", type=int, default=64)
    ap.add_argument("--save-result", action="store_true")
    ap.add_argument("--result-dir", default=".")
    ap.add_argument("--result-filename", default="result.json")
    a, _unknown = ap.parse_known_args(argv)
    load = LoadSpec(concurrency=a.max_concurrency, requests=a.num_prompts,
                    max_tokens=a.random_output_len)
    r = LoadProbe(ProbeSpec(), load).measure(ServerHandle(url=a.base_url, model=a.model))
    doc = {"date": time.strftime("%Y%m%d-%H%M%S"), "backend": "vllm", "model_id": a.model,
           "num_prompts": a.num_prompts, "max_concurrency": a.max_concurrency,
           "duration": r.duration_s, "completed": r.requests, "failed": r.errors,
           "total_output_tokens": r.output_tokens, "request_throughput": r.requests / r.duration_s,
           "output_throughput": r.output_tok_s, "total_token_throughput": r.output_tok_s,
           "median_tpot_ms": r.tpot_ms, "mean_tpot_ms": r.tpot_ms, "median_ttft_ms": None}
    print("============ Serving Benchmark Result ============")
    print(f"Output token throughput (tok/s):         {r.output_tok_s:.2f}")
    if a.save_result:
        Path(a.result_dir).mkdir(parents=True, exist_ok=True)
        (Path(a.result_dir) / a.result_filename).write_text(json.dumps(doc))
