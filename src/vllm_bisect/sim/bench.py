"""``vllm bench serve`` for the simulator's synthetic vLLM (the subset vllm-bisect uses).

Drives a running server with the closed-loop load generator and writes the result file in
vLLM 0.25.1's ``--save-result`` format (the keys of tests/fixtures/vllm-0.25.1-bench), so the
``vllm bench serve`` probe runs end to end without a GPU. Dataset flags are accepted and
ignored (prompts are the probe's default), except ``--dataset-name custom``: then the prompts
come from ``--dataset-path`` (JSONL ``{"prompt": ...}``), ``--custom-output-len`` sets the output
length, ``--num-warmups`` requests run first at ``--max-concurrency``, and requests are timed by
bench's own client logic (vLLM's ``async_request_openai_completions``: TTFT at the first chunk
with text, one ITL per later chunk, output tokens from ``usage``), independent of the probe's;
``--save-detailed`` adds the per-request ``ttfts``/``itls`` (s), ``output_lens`` and
``start_times`` (``time.perf_counter`` at each request's start, as vLLM's client records them).
Like vLLM 0.25.1 it prints "Starting main benchmark run..." (flushed) just before the main run's
first request, which a caller can wait for to run something alongside.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

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
    ap.add_argument("--dataset-name", default="random")
    ap.add_argument("--dataset-path", default=None)
    ap.add_argument("--custom-output-len", type=int, default=256)
    ap.add_argument("--num-warmups", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--save-detailed", action="store_true")
    a, _unknown = ap.parse_known_args(argv)
    if a.dataset_name == "custom":
        doc = custom(a)
        print("============ Serving Benchmark Result ============")
        print(f"Mean TPOT (ms):                          {doc['mean_tpot_ms']:.2f}")
        if a.save_result:
            Path(a.result_dir).mkdir(parents=True, exist_ok=True)
            (Path(a.result_dir) / a.result_filename).write_text(json.dumps(doc))
        return
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


def _one(http: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed completion, timed as vLLM's bench client times it."""
    st = time.perf_counter()
    last, ttft, itl, out, text = st, 0.0, [], 0, ""
    with http.stream("POST", f"{url}/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            chunk = line.removeprefix("data: ").strip()
            if not chunk or chunk == "[DONE]":
                continue
            data = json.loads(chunk)
            now = time.perf_counter()
            if data.get("choices") and data["choices"][0].get("text"):
                if ttft == 0.0:
                    ttft = now - st
                else:
                    itl.append(now - last)
                last = now
                text += data["choices"][0]["text"]
            if data.get("usage"):
                out = int(data["usage"]["completion_tokens"])
    return {"ttft": ttft, "itl": itl, "latency": last - st, "output_len": out, "text": text,
            "start": st}


def custom(a: argparse.Namespace) -> dict[str, Any]:
    lines = Path(a.dataset_path).read_text().splitlines()
    prompts = [json.loads(x)["prompt"] for x in lines if x.strip()]
    body: dict[str, Any] = {"model": a.model, "max_tokens": a.custom_output_len, "stream": True,
                            "stream_options": {"include_usage": True}}
    if a.temperature is not None:
        body["temperature"] = a.temperature
    if a.ignore_eos:
        body["ignore_eos"] = True
    url, c = a.base_url.rstrip("/"), max(1, a.max_concurrency)
    with httpx.Client(timeout=httpx.Timeout(30.0, read=600.0),
                      limits=httpx.Limits(max_connections=c + 2)) as http:
        if a.num_warmups:
            with ThreadPoolExecutor(max_workers=c) as pool:
                for f in [pool.submit(_one, http, url, body | {"prompt": prompts[i % len(prompts)]})
                          for i in range(a.num_warmups)]:
                    f.result()
        results: list[dict[str, Any] | None] = [None] * a.num_prompts
        lock, nxt = threading.Lock(), [0]

        def worker() -> None:
            while True:
                with lock:
                    i = nxt[0]
                    if i >= a.num_prompts:
                        return
                    nxt[0] += 1
                results[i] = _one(http, url, body | {"prompt": prompts[i % len(prompts)]})

        # vLLM 0.25.1's lines before the main run (ready_check_timeout_sec 0: no check)
        print("Starting initial single prompt test run...\nSkipping endpoint ready check.\n"
              "Starting main benchmark run...", flush=True)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=c) as pool:
            for w in [pool.submit(worker) for _ in range(c)]:
                w.result()
        wall = time.perf_counter() - t0
    done = [r for r in results if r is not None]
    tpots = [(r["latency"] - r["ttft"]) / (r["output_len"] - 1) for r in done if r["output_len"] > 1]
    itls = [g for r in done for g in r["itl"]]
    out = sum(r["output_len"] for r in done)
    doc: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S"), "backend": "vllm", "model_id": a.model,
        "num_prompts": a.num_prompts, "max_concurrency": a.max_concurrency, "duration": wall,
        "completed": len(done), "failed": a.num_prompts - len(done), "total_output_tokens": out,
        "request_throughput": len(done) / wall, "output_throughput": out / wall,
        "total_token_throughput": out / wall,
        "mean_ttft_ms": 1000.0 * statistics.fmean(r["ttft"] for r in done),
        "mean_tpot_ms": 1000.0 * statistics.fmean(tpots) if tpots else 0.0,
        "median_tpot_ms": 1000.0 * statistics.median(tpots) if tpots else 0.0,
        "mean_itl_ms": 1000.0 * statistics.fmean(itls) if itls else 0.0}
    if a.save_detailed:
        doc |= {"output_lens": [r["output_len"] for r in done],
                "ttfts": [r["ttft"] for r in done], "itls": [r["itl"] for r in done],
                "start_times": [r["start"] for r in done],
                "generated_texts": [r["text"] for r in done]}
    return doc
