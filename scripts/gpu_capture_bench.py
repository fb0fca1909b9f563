#!/usr/bin/env python3
"""On a GPU machine with vLLM: the load probe and the MTP speed-up against real `vllm serve`,
and the JSON that `vllm bench serve --save-result` and `vllm bench throughput --output-json`
write (captured for the parsers' tests).

    python3 scripts/gpu_capture_bench.py WORK_DIR OUT_DIR

WORK_DIR holds (or gets) the tiny model of scripts/make_tiny_model.py. Everything measured
is written to OUT_DIR as JSON, with the commands that ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vllm_bisect.probes.decode import DecodeProbe  # noqa: E402
from vllm_bisect.probes.load import LoadProbe  # noqa: E402
from vllm_bisect.runtime.process import LaunchPlan, free_port, run_server  # noqa: E402
from vllm_bisect.spec import LoadSpec, ProbeSpec  # noqa: E402

ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
       "DO_NOT_TRACK": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
COMMON = ["--max-model-len", "2048", "--enforce-eager", "--gpu-memory-utilization", "0.25"]
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
                    "prompt_lookup_min": 1})
PROMPT = " ".join(["hello"] * 20)


def main() -> None:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    model = work / "tiny"
    if not (model / "model.safetensors").exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tiny_model.py"), str(model)],
                       check=True)
    vllm = shutil.which("vllm") or "vllm"
    probe = ProbeSpec(prompt=PROMPT, max_tokens=64, requests=3)
    doc: dict[str, Any] = {"servers": {}}
    for name, extra in (("ngram", ["--speculative-config", NGRAM]), ("plain", [])):
        port = free_port()
        argv = [vllm, "serve", str(model), "--port", str(port), *COMMON, *extra]
        t0 = time.monotonic()
        with run_server(LaunchPlan(argv=argv, env=ENV), url=f"http://127.0.0.1:{port}",
                        model=str(model), log_path=out / f"serve_{name}.log", timeout_s=600) as h:
            entry: dict[str, Any] = {"argv": argv, "startup_s": h.startup_s}
            m = DecodeProbe(probe, 64).measure(h)
            entry["decode"] = m.model_dump(mode="json", exclude={"requests"})
            for c in (1, 8):
                res = LoadProbe(probe, LoadSpec(concurrency=c, requests=4 * c, max_tokens=256))
                entry[f"load_c{c}"] = res.measure(h).model_dump(mode="json")
            if name == "ngram":
                cmd = [vllm, "bench", "serve", "--backend", "vllm", "--base-url", h.url,
                       "--model", str(model), "--tokenizer", str(model), "--dataset-name",
                       "random", "--random-input-len", "20", "--random-output-len", "64",
                       "--num-prompts", "16", "--max-concurrency", "4", "--ignore-eos",
                       "--save-result", "--result-dir", str(out), "--result-filename",
                       "bench_serve.json"]
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                                   env={**os.environ, **ENV})
                (out / "bench_serve_stdout.txt").write_text(
                    "$ " + " ".join(cmd) + "\n" + r.stdout + "\n--- stderr ---\n" + r.stderr[-4000:])
                entry["bench_serve_rc"] = r.returncode
        entry["total_s"] = time.monotonic() - t0
        doc["servers"][name] = entry
        (out / "load_probe_real.json").write_text(json.dumps(doc, indent=2))
    on = doc["servers"]["ngram"]["load_c1"]["output_tok_s"]
    off = doc["servers"]["plain"]["load_c1"]["output_tok_s"]
    doc["mtp_speedup_c1"] = on / off
    doc["mtp_speedup_c8"] = (doc["servers"]["ngram"]["load_c8"]["output_tok_s"]
                             / doc["servers"]["plain"]["load_c8"]["output_tok_s"])
    (out / "load_probe_real.json").write_text(json.dumps(doc, indent=2))
    cmd = [vllm, "bench", "throughput", "--model", str(model), "--tokenizer", str(model),
           "--dataset-name", "random", "--input-len", "20", "--output-len", "64",
           "--num-prompts", "32", *COMMON, "--output-json", str(out / "bench_throughput.json")]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=400,
                       env={**os.environ, **ENV})
    (out / "bench_throughput_stdout.txt").write_text(
        "$ " + " ".join(cmd) + f"\n(rc {r.returncode}, {time.monotonic() - t0:.0f} s)\n"
        + r.stdout[-6000:] + "\n--- stderr ---\n" + r.stderr[-4000:])


if __name__ == "__main__":
    main()
