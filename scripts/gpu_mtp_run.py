#!/usr/bin/env python3
"""Issue 16 on a GPU machine with vLLM 0.25.1: real MTP on a tiny Qwen3-Next, captured and
measured, in stages that resume (a stage whose result exists is not run again).

    python3 scripts/gpu_mtp_run.py WORK OUT [--budget-s 540] [--only a,b]

Session 4 (2026-12-03) ran `--only env,model,peer,b,sweep,compare`: peer (MTP server: the
probe and `vllm bench serve --dataset-name custom` on the SAME prompt text, both warmed at the
measured concurrency, GPU state sampled throughout), B, the 3x2 sweep, compare; the peer stage
again with `--peer-min-tokens 1` (and `--peer-c4-bench-first`). Commands:
docs/validation/mtp_gpu_runs_session4.log.

Stages (in order): env, model, A (MTP server: raw captures, /metrics before/after, /tokenize,
the decode probe, sized prompts, the `vllm bench serve` peer check), sweep (`vllm-bisect
sweep`: MTP on/off over concurrency x context), compare (`vllm-bisect compare`:
VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE=1 vs 0, MTP on), B (the same model with
generation_config max_new_tokens=128: captures without max_tokens). WORK/res holds every
result; it is tarred to OUT/results.tgz after each stage. A stage is skipped when less than its
estimate is left of the budget.

peer_interleaved (after session 4; one concurrency per call, `--peer-conc C`): on one MTP server,
a warm-up at C, then `--peer-pairs` pairs of bench / probe blocks in ABBA order on the same
prompt, compared pair by pair (`probes.peer.paired_peer_check`), so the server's drift between
windows cancels. `--vllm CMD` replaces the vllm command, e.g. `--vllm "python3 -m
vllm_bisect.sim vllm"` runs serve and bench serve on the simulator
(tests/probes/test_peer_interleaved.py).

peer_concurrent (after session 7; all of `--peer-conc-list` in one call): on one MTP server,
`--peer-rounds` rounds per concurrency C in which `vllm bench serve` (N + C requests at C) and
the probe (N at C) run AT THE SAME TIME on the same prompt: the probe starts when bench prints
"Starting main benchmark run", bench's extra wave keeps its load on until the probe is done,
and only bench's requests inside the probe's window (by its --save-detailed start_times) are
compared, so both tools' requests share the engine's steps and the drift hits both alike
(`probes.peer.concurrent_peer_check`). Resumes from peer_concurrent.partial.json on a new
server when a call was cut short (tests/probes/test_peer_concurrent.py).

`--no-eager` serves without `--enforce-eager` (CUDA graphs + torch.compile); the serve argv
and the peer results record `enforce_eager`, and the peer_interleaved results are then named
`peer_interleaved_graphs_c{C}` (session 7, 2026-12-03, ran `--only env,model,peer_interleaved`
with `--peer-conc 1`, `--peer-conc 4 --peer-pairs 8`, and `--peer-conc 1 --peer-pairs 8
--no-eager`: docs/validation.md (f)).

Besides the wheels of ../shared/gpu/vllm-0.25.1-serve-wheels.txt, Qwen3-Next needs
compressed-tensors==0.17.0 and loguru (without them the model fails to be inspected:
"No module named 'compressed_tensors'"). On 2026-12-03 the sweep ran with the grid cut to
concurrency [1, 12], requests 3, max_tokens 128 and compare with 4 pairs to fit the device time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vllm_bisect.models import Measurement  # noqa: E402
from vllm_bisect.probes.decode import DecodeProbe  # noqa: E402
from vllm_bisect.probes.peer_summary import concurrent_summary, interleaved_summary  # noqa: E402
from vllm_bisect.probes.peer_summary import pct as _pct  # noqa: E402
from vllm_bisect.runtime.process import LaunchPlan, free_port, run_server  # noqa: E402
from vllm_bisect.spec import Endpoint, ProbeSpec  # noqa: E402

ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
       "DO_NOT_TRACK": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
MAX_LEN = 40960
# FlashInfer is not installed: on SM90 vLLM 0.25.1 would pick FlashInfer's GDN prefill ("auto")
COMMON = ["--max-model-len", str(MAX_LEN), "--enforce-eager", "--gpu-memory-utilization", "0.3",
          "--dtype", "bfloat16", "--additional-config", json.dumps({"gdn_prefill_backend": "triton"})]
MTP = json.dumps({"method": "mtp", "num_speculative_tokens": 3})
PROMPT = "Write a long story about a lighthouse keeper who finds a map."
# the peer check of session 4: same prompt text on both sides, fixed lengths
PEER_IN, PEER_OUT, PEER_N1, PEER_N4 = 256, 256, 12, 24
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


# -- raw HTTP capture (the format of tests/fixtures/vllm-0.25.1/) --------------------------
def capture(port: int, method: str, path: str, body: dict[str, Any] | None,
            timeout: float = 300.0, deadline_s: float = 90.0) -> dict[str, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: raw-capture/1\r\n"
            "Accept: */*\r\nConnection: close\r\n")
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    raw_req = head.encode() + b"\r\n" + payload
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.perf_counter()
    s.sendall(raw_req)
    data, events = b"", []
    truncated = False
    while True:
        if time.perf_counter() - t0 > deadline_s:  # a cap that did not apply: stop reading
            truncated = True
            break
        got = s.recv(65536)
        if not got:
            break
        events.append({"t": round(time.perf_counter() - t0, 6), "nbytes": len(got)})
        data += got
    s.close()
    hdr, _, rest = data.partition(b"\r\n\r\n")
    lines = hdr.decode("latin-1").split("\r\n")
    headers = [tuple(x.split(": ", 1)) for x in lines[1:] if ": " in x]
    chunked = any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers)
    rec: dict[str, Any] = {
        "request": {"method": method, "path": path, "port": port, "body": body,
                    "raw_request": raw_req.decode()},
        "status_line": lines[0], "headers": [list(h) for h in headers],
        "transfer_chunked": chunked, "recv_events": events, "truncated_by_deadline": truncated}
    if truncated:
        rec["raw_response_head"] = data[:20000].decode("utf-8", errors="replace")
        return rec
    body_bytes, sizes = rest, []
    if chunked:
        body_bytes, pos = b"", 0
        while pos < len(rest):
            eol = rest.index(b"\r\n", pos)
            n = int(rest[pos:eol].split(b";")[0], 16)
            sizes.append(n)
            if n == 0:
                break
            body_bytes += rest[eol + 2: eol + 2 + n]
            pos = eol + 2 + n + 2
    rec["http_chunk_sizes"] = sizes
    ctype = dict((k.lower(), v) for k, v in headers).get("content-type", "")
    if "text/event-stream" in ctype:
        # time of each SSE line = time of the recv that delivered its last byte
        header_len = len(hdr) + 4
        ends, acc = [], 0
        for e in events:
            acc += e["nbytes"]
            ends.append((acc, e["t"]))
        sse, raw_pos = [], header_len
        # map body offsets back to raw offsets through the chunk framing
        offsets, pos, body_off = [], 0, 0
        while pos < len(rest) and chunked:
            eol = rest.index(b"\r\n", pos)
            n = int(rest[pos:eol].split(b";")[0], 16)
            if n == 0:
                break
            offsets.append((body_off, header_len + eol + 2))
            body_off += n
            pos = eol + 2 + n + 2
        start = 0
        for line in body_bytes.split(b"\n"):
            end_body = start + len(line)
            raw_end = end_body + raw_pos
            for b_off, r_off in offsets:
                if b_off < end_body:
                    raw_end = r_off + (end_body - b_off)
            t = next((tt for a, tt in ends if a >= raw_end), events[-1]["t"] if events else 0.0)
            if line:
                sse.append({"t": t, "line": line.decode()})
            start = end_body + 1
        rec["sse_lines"] = sse
        rec["analysis"] = analyse(sse)
        if len(data) < 400_000:
            rec["raw_response"] = data.decode("utf-8", errors="replace")
    else:
        rec["body"] = body_bytes.decode("utf-8", errors="replace")
    return rec


def analyse(sse: list[dict[str, Any]]) -> dict[str, Any]:
    chunks, last, final_usage = [], 0, None
    for ev in sse:
        line = ev["line"]
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        obj = json.loads(line[6:])
        ch = obj.get("choices") or []
        usage = obj.get("usage")
        if not ch:
            final_usage = usage
            continue
        c0 = ch[0]
        text = c0.get("text") if "text" in c0 else (c0.get("delta") or {}).get("content")
        entry: dict[str, Any] = {"t": ev["t"], "text": text, "n_words": len((text or "").split()),
                                 "usage": usage, "finish_reason": c0.get("finish_reason")}
        if isinstance(usage, dict):
            entry["completion_tokens_delta"] = usage["completion_tokens"] - last
            last = usage["completion_tokens"]
        chunks.append(entry)
    content = [c for c in chunks if c["text"]]
    deltas = [c.get("completion_tokens_delta") for c in content]
    hist: dict[str, int] = {}
    for d in (deltas if all(d is not None for d in deltas) else [c["n_words"] for c in content]):
        hist[str(d)] = hist.get(str(d), 0) + 1
    return {"n_data_lines": len(sse), "n_content_chunks": len(content),
            "tokens_per_content_chunk_hist": hist, "final_usage": final_usage,
            "chunk_tokens": deltas, "chunks": chunks}


def get(port: int, path: str) -> str:
    import httpx
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=30).text


def vllm_lines(text: str) -> str:
    return "\n".join(x for x in text.splitlines()
                     if x.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:"))) + "\n"


class GpuSampler:
    """``runtime.gpustate.read_state()`` (NVML, else nvidia-smi) every few seconds in a thread,
    plus the nvidia-smi path once, so both sources are seen on the real GPU."""

    def __init__(self, every_s: float = 3.0) -> None:
        import threading
        self.every_s, self.samples = every_s, {"nvml_or_smi": [], "smi_once": None}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        from vllm_bisect.runtime import gpustate as g
        try:
            gpus = g._smi([f"--query-gpu={g.GPU_QUERY}", g.CSV], 10.0)
            apps = g._smi([f"--query-compute-apps={g.APPS_QUERY}", g.CSV], 10.0)
            self.samples["smi_once"] = {"raw_gpus": gpus, "raw_apps": apps}
        except Exception as err:
            self.samples["smi_once"] = {"error": repr(err)}
        while not self._stop.is_set():
            try:
                st = g.read_state()
                self.samples["nvml_or_smi"].append(
                    {"t": round(time.monotonic() - T0, 1),
                     "state": st.as_dict() if st is not None else None})
            except Exception as err:
                self.samples["nvml_or_smi"].append({"error": repr(err)})
            self._stop.wait(self.every_s)

    def start(self) -> None:
        self._t.start()

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=15)


# -- stages --------------------------------------------------------------------------------
class Run:
    def __init__(self, work: Path, out: Path, budget: float) -> None:
        self.work, self.out, self.res = work, out, work / "res"
        self.res.mkdir(parents=True, exist_ok=True)
        self.deadline = T0 + budget
        self.vllm = [shutil.which("vllm") or "vllm"]  # --vllm: e.g. the simulator's entry
        self.peer_in, self.peer_out = PEER_IN, PEER_OUT
        # peer_interleaved: one concurrency per call, PAIRS pairs of BLOCK_N-request blocks
        self.pi_conc, self.pi_pairs, self.pi_block_n = 1, 6, 0
        # peer_concurrent: ROUNDS rounds per concurrency, the concurrencies in one call
        self.pc_concs, self.pc_rounds = [1, 4], 4
        # peer_concurrent: one discarded concurrent round per C on every new server before its
        # first measured round (--no-peer-warm-round: none, to see a cold server's first round)
        self.pc_warm_round = True
        # the peer check's variants (session 4: run 1 = defaults; runs 2, 3 = min_tokens 1,
        # run 2 with bench first at c=4 as well)
        self.peer_min_tokens: int | None = None
        self.peer_c4_bench_first = False
        # --no-eager: serve without --enforce-eager (CUDA graphs + torch.compile; session 7's
        # third run)
        self.eager = True

    def mode_tag(self) -> str:
        """Infix of the peer stages' result names: "" eager, "_graphs" under ``--no-eager`` (so
        the two modes resume separately in one WORK)."""
        return "" if self.eager else "_graphs"

    def common(self) -> list[str]:
        """COMMON, less ``--enforce-eager`` under ``--no-eager``."""
        return COMMON if self.eager else [x for x in COMMON if x != "--enforce-eager"]

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self, name: str, obj: Any) -> None:
        p = self.res / name
        p.write_text(obj if isinstance(obj, str) else json.dumps(obj, indent=2, default=str))

    def pack(self) -> None:
        with tarfile.open(self.out / "results.tgz", "w:gz") as tar:
            tar.add(self.res, arcname="res")

    def server(self, name: str, model: Path, extra: list[str], env: dict[str, str] | None = None):
        port = free_port()
        argv = [*self.vllm, "serve", str(model), "--port", str(port), *self.common(), *extra]
        self.save(f"{name}_argv.json", {"argv": argv, "env": {**ENV, **(env or {})},
                                        "enforce_eager": self.eager})
        return run_server(LaunchPlan(argv=argv, env={**ENV, **(env or {})}),
                          url=f"http://127.0.0.1:{port}", model=str(model),
                          log_path=self.res / f"{name}_server.log", timeout_s=420)

    # env ------------------------------------------------------------------------------
    def stage_env(self) -> None:
        cmds = ["nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv",
                "python3 -c 'import torch,sys;print(sys.version);print(torch.__version__,"
                "torch.version.cuda)'",
                "python3 -c 'import vllm,transformers;print(vllm.__version__,"
                "transformers.__version__)'",
                f"{shlex.join(self.vllm)} --version", "pip list --path /tmp/site 2>/dev/null | head -60"]
        outs = []
        for c in cmds:
            r = subprocess.run(c, shell=True, capture_output=True, text=True, timeout=120)
            outs.append(f"$ {c}\n{r.stdout}{r.stderr[-2000:]}")
        self.save("env.txt", "\n".join(outs))

    def stage_model(self) -> None:
        info = {}
        for name, extra in (("mtp", []), ("mtp128", ["--max-new-tokens", "128"])):
            r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tiny_mtp_model.py"),
                                str(self.work / name), *extra], capture_output=True, text=True,
                               timeout=300)
            info[name] = r.stdout + r.stderr[-3000:]
            if r.returncode != 0:
                raise RuntimeError(f"model build failed: {info[name]}")
        self.save("model_build.json", info)

    # A --------------------------------------------------------------------------------
    def stage_a(self) -> None:
        t = time.monotonic()
        with self.server("A", self.work / "mtp", ["--speculative-config", MTP]) as h:
            port = int(h.url.rsplit(":", 1)[1])
            doc: dict[str, Any] = {"startup_s": h.startup_s, "launched_after_s": t - T0}
            log(f"A healthy after {h.startup_s:.1f} s")
            model = str(self.work / "mtp")
            eps = {p: capture(port, "GET", p, None) for p in ("/v1/models", "/version", "/health")}
            eps["/tokenize"] = capture(port, "POST", "/tokenize", {"model": model, "prompt": PROMPT})
            eps["/tokenize chat"] = capture(port, "POST", "/tokenize", {
                "model": model, "messages": [{"role": "user", "content": PROMPT}],
                "add_generation_prompt": True, "return_token_strs": True})
            before = vllm_lines(get(port, "/metrics"))
            base = {"model": model, "temperature": 0, "stream": True, "ignore_eos": True}
            cont = {"include_usage": True, "continuous_usage_stats": True}
            caps: dict[str, Any] = {"endpoints": eps}
            caps["completions_stream_continuous_usage"] = capture(port, "POST", "/v1/completions", {
                **base, "prompt": PROMPT, "max_tokens": 200, "stream_options": cont})
            caps["completions_stream_include_usage_only"] = capture(
                port, "POST", "/v1/completions", {**base, "prompt": PROMPT, "max_tokens": 200,
                                                  "stream_options": {"include_usage": True}})
            caps["chat_stream_continuous_usage"] = capture(port, "POST", "/v1/chat/completions", {
                **base, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 200,
                "stream_options": cont})
            caps["completions_nonstream"] = capture(port, "POST", "/v1/completions", {
                "model": model, "temperature": 0, "prompt": PROMPT, "max_tokens": 32})
            time.sleep(1.5)
            after = vllm_lines(get(port, "/metrics"))
            self.save("sse_mtp_k3_qwen3next.json", caps)
            self.save("metrics_A.txt", "########## A_mtp_qwen3next: before requests\n" + before
                      + "########## A_mtp_qwen3next: after requests\n" + after)
            log("A captures done")
            probe = ProbeSpec(prompt=PROMPT, max_tokens=256, requests=5)
            doc["decode"] = DecodeProbe(probe, 256).measure(h).model_dump(mode="json")
            sized = {}
            for n in (2048, 32768):
                for ep in (Endpoint.COMPLETIONS, Endpoint.CHAT):
                    sp = ProbeSpec(prompt=PROMPT, prompt_tokens=n, max_tokens=64, requests=2,
                                   endpoint=ep)
                    m = DecodeProbe(sp, 64).measure(h)
                    sized[f"{ep.value}_{n}"] = m.model_dump(mode="json", exclude={"requests"}) | {
                        "prompt_tokens_per_request": [r.prompt_tokens for r in m.requests]}
            doc["sized_prompts"] = sized
            log("A probe + sized prompts done")
            doc["peer"] = self.peer(h, port, model)
            self.save("A.json", doc)

    def peer(self, h: Any, port: int, model: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for conc, n in ((1, 16), (4, 32)):
            name = f"bench_serve_c{conc}"
            cmd = [*self.vllm, "bench", "serve", "--backend", "vllm", "--base-url", h.url,
                   "--model", model, "--tokenizer", model, "--dataset-name", "random",
                   "--random-input-len", "256", "--random-output-len", "512",
                   "--num-prompts", str(n), "--max-concurrency", str(conc), "--ignore-eos",
                   "--temperature", "0", "--num-warmups", "1", "--save-result", "--save-detailed",
                   "--result-dir", str(self.res), "--result-filename", f"{name}.json"]
            r = self.run_saved(cmd, name, 300)
            sp = ProbeSpec(prompt=PROMPT, prompt_tokens=256, max_tokens=512, requests=n,
                           concurrency=conc, warmup=1)
            m = DecodeProbe(sp, 512).measure(h)
            reqs = m.requests
            out[f"c{conc}"] = {
                "bench_rc": r.returncode,
                "probe": m.model_dump(mode="json"),
                "probe_mean_itl_ms": statistics.fmean(x.itl_ms for x in reqs if x.itl_ms),
                "probe_mean_tpot_ms": statistics.fmean(x.tpot_ms for x in reqs if x.tpot_ms),
                "probe_mean_chunk_itl_ms": statistics.fmean(
                    x.chunk_itl_ms for x in reqs if x.chunk_itl_ms),
                "probe_pooled_chunk_gap_ms": (
                    sum((x.latency_ms - x.ttft_ms) for x in reqs)
                    / sum(x.n_chunks - 1 for x in reqs)),
            }
            log(f"peer c={conc} done (bench rc {r.returncode})")
        return out


    def run_saved(self, cmd: list[str], name: str, timeout: int) -> Any:
        """Run a `vllm bench` command; its command line, exit code, time and output tails go
        to NAME_stdout.txt."""
        t = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **ENV})
        self.save(f"{name}_stdout.txt", "$ " + " ".join(cmd) + f"\n(rc {r.returncode}, "
                  f"{time.monotonic() - t:.0f} s)\n" + r.stdout[-8000:] + "\n--- stderr ---\n"
                  + r.stderr[-4000:])
        return r

    # peer check, same prompts on both sides (session 4) --------------------------------
    def bench_cmd(self, h: Any, model: str, name: str, jsonl: Path, conc: int, n: int,
                  warm: int) -> list[str]:
        from vllm_bisect.probes.peer_rounds import bench_serve_argv

        return bench_serve_argv(self.vllm, h.url, model, jsonl, self.peer_out, conc, n, warm,
                                self.res, name)

    def bench(self, h: Any, model: str, name: str, jsonl: Path, conc: int, n: int,
              warm: int) -> dict[str, Any]:
        cmd = self.bench_cmd(h, model, name, jsonl, conc, n, warm)
        r = self.run_saved(cmd, name, 400)
        if r.returncode != 0:
            raise RuntimeError(f"{name}: rc {r.returncode}: {r.stderr[-500:]}")
        return dict(json.loads((self.res / f"{name}.json").read_text()))

    def stage_peer(self) -> None:
        import httpx

        from vllm_bisect.probes.peer import peer_check
        from vllm_bisect.runtime.gpustate import observe, process_tree, read_state

        sampler = GpuSampler()
        sampler.start()
        try:
            with self.server("P", self.work / "mtp", ["--speculative-config", MTP]) as h:
                log(f"P healthy after {h.startup_s:.1f} s")
                model = str(self.work / "mtp")
                doc: dict[str, Any] = {"startup_s": h.startup_s, "in": PEER_IN, "out": PEER_OUT,
                                       "enforce_eager": self.eager}
                sp = ProbeSpec(prompt=PROMPT, prompt_tokens=PEER_IN, max_tokens=PEER_OUT)
                with httpx.Client(timeout=60) as c:
                    sized = DecodeProbe(sp, PEER_OUT).sized_prompt(c, h, PEER_IN)
                assert sized is not None
                text = sized.text
                doc["prompt"] = text
                jsonl = self.work / "peer_prompts.jsonl"
                jsonl.write_text("".join(json.dumps({"prompt": text}) + "\n" for _ in range(64)))
                self.save("peer_prompts.jsonl", jsonl.read_text())

                def probe(conc: int, n: int) -> Any:
                    spec = ProbeSpec(prompt=text, max_tokens=PEER_OUT, requests=n,
                                     min_tokens=self.peer_min_tokens,
                                     concurrency=conc, warmup=0)
                    return DecodeProbe(spec, PEER_OUT).measure(h)

                own = process_tree(h.pid)
                for conc, n, bench_first in ((1, PEER_N1, True),
                                             (4, PEER_N4, self.peer_c4_bench_first)):
                    cell: dict[str, Any] = {}
                    for side in (("bench", "probe") if bench_first else ("probe", "bench")):
                        if side == "bench":
                            # --num-warmups runs full-length warm-ups at --max-concurrency
                            bj = self.bench(h, model, f"peer_bench_c{conc}", jsonl, conc, n,
                                            warm=2 * conc)
                            cell["bench_order"] = len(cell)
                        else:
                            warm = probe(conc, 2 * conc)  # warm-up at the measured concurrency
                            before = read_state()
                            m = probe(conc, n)
                            after = read_state()
                            rec, note = observe(before, after, own)
                            cell["probe_warmup_itl_ms"] = warm.itl_ms
                            cell["probe"] = m.model_dump(mode="json")
                            cell["gpu_state"] = rec
                            cell["gpu_note"] = note
                            cell["probe_order"] = len(cell)
                    pc = peer_check(Measurement.model_validate(cell["probe"]), bj)
                    cell["peer_check"] = {**pc.__dict__, "per_token_diff": pc.per_token_diff,
                                          "per_chunk_diff": pc.per_chunk_diff,
                                          "acceptance_adjusted_diff": pc.acceptance_adjusted_diff,
                                          "agrees_3pct": pc.agrees(0.03)}
                    doc[f"c{conc}"] = cell
                    log(f"peer c={conc}: bench TPOT {pc.bench_tpot_ms:.3f} probe ITL "
                        f"{pc.probe_itl_ms:.3f} ({pc.per_token_diff:+.2%}); chunk "
                        f"{pc.bench_itl_ms:.3f} vs {pc.probe_chunk_itl_ms:.3f} "
                        f"({pc.per_chunk_diff:+.2%})")
                    self.save("peer.partial.json", doc)
                doc["server_pids"] = sorted(own)
        finally:
            sampler.stop()
            self.save("gpustate_samples.json", sampler.samples)
        self.save("peer.json", doc)

    # peer check, interleaved blocks on one server (issue 16, after session 4) ------------
    def stage_peer_interleaved(self) -> None:
        """On one MTP server: a warm-up at the measured concurrency, then PAIRS pairs of blocks
        (bench, probe, probe, bench, ...: ABBA, so a linear drift of the server's speed cancels),
        each block BLOCK_N requests of the same sized prompt; the paired comparison of
        ``probes.peer.paired_peer_check``. Stops before a quad (two pairs) that would not fit
        the budget, so the pairs stay balanced."""
        import httpx

        from vllm_bisect.probes.peer import PeerBlock, PeerSide, abba_order, paired_peer_check
        from vllm_bisect.probes.peer_rounds import (
            block_of_bench,
            block_of_probe,
            pairs_fit,
            prompts_jsonl,
        )

        c = self.pi_conc
        n = self.pi_block_n or max(6, 2 * c)
        tag = f"peer_interleaved{self.mode_tag()}_c{c}"
        sampler = GpuSampler()
        sampler.start()
        try:
            with self.server(tag, self.work / "mtp", ["--speculative-config", MTP]) as h:
                log(f"{tag}: healthy after {h.startup_s:.1f} s")
                model = str(self.work / "mtp")
                doc: dict[str, Any] = {
                    "startup_s": h.startup_s, "concurrency": c, "block_requests": n,
                    "pairs_planned": self.pi_pairs, "in": self.peer_in, "out": self.peer_out,
                    "vllm": self.vllm, "enforce_eager": self.eager, "blocks": []}
                sp = ProbeSpec(prompt=PROMPT, prompt_tokens=self.peer_in, max_tokens=self.peer_out)
                with httpx.Client(timeout=60) as http:
                    sized = DecodeProbe(sp, self.peer_out).sized_prompt(http, h, self.peer_in)
                assert sized is not None
                text = doc["prompt"] = sized.text
                jsonl = self.work / f"{tag}_prompts.jsonl"
                jsonl.write_text(prompts_jsonl(text, max(64, n)))

                def probe(k: int) -> Measurement:
                    spec = ProbeSpec(prompt=text, max_tokens=self.peer_out, requests=k,
                                     min_tokens=self.peer_min_tokens, concurrency=c, warmup=0)
                    return DecodeProbe(spec, self.peer_out).measure(h)

                # warm-up at the measured concurrency, full length (bench blocks then run
                # without warm-ups of their own: --num-warmups 0)
                doc["warmup_itl_ms"] = probe(2 * c).itl_ms
                blocks: list[PeerBlock] = []
                chunk_blocks: list[PeerBlock] = []
                took: dict[PeerSide, list[float]] = {PeerSide.BENCH: [], PeerSide.PROBE: []}
                for i, side in enumerate(abba_order(self.pi_pairs)):
                    stop = pairs_fit(i, took, self.left())
                    if stop is not None:
                        doc["stopped"] = stop
                        log(f"{tag}: {doc['stopped']}")
                        break
                    t0 = time.monotonic()
                    name = f"{tag}_{side.value}{i:02d}"
                    if side is PeerSide.BENCH:
                        blk, chunk, rec = block_of_bench(self.bench(h, model, name, jsonl, c, n,
                                                                    warm=0))
                    else:
                        m = probe(n)
                        self.save(f"{name}.json", m.model_dump(mode="json"))
                        blk, chunk, rec = block_of_probe(m)
                    took[side].append(time.monotonic() - t0)
                    blocks.append(blk)
                    chunk_blocks.append(chunk)
                    doc["blocks"].append({
                        "index": i, "side": side.value, "file": f"{name}.json",
                        "start_s": round(t0 - T0, 2), "end_s": round(time.monotonic() - T0, 2),
                        "mean_ms": blk.mean_ms, "per_request_ms": list(blk.per_request_ms), **rec})
                    log(f"{tag}: block {i} {side.value}: {blk.mean_ms:.3f} ms/token "
                        f"({took[side][-1]:.1f} s)")
                    self.save(f"{tag}.partial.json", doc)
                keep = len(blocks) - len(blocks) % 2
                pp = paired_peer_check(blocks[:keep])
                doc["paired"] = pp.as_dict()
                doc["paired_chunk"] = paired_peer_check(chunk_blocks[:keep]).as_dict()
        finally:
            sampler.stop()
            self.save(f"{tag}_gpustate_samples.json", sampler.samples)
        self.save(f"{tag}.json", doc)
        self.save(f"{tag}_summary.md", interleaved_summary(doc))
        log(f"{tag}: paired mean {pp.mean_diff:+.2%} (CI over {pp.ci_basis} {_pct(pp.ci_low)}.."
            f"{_pct(pp.ci_high)}), median "
            f"{pp.median_diff:+.2%}, pooled {pp.pooled_diff:+.2%}, first pair "
            f"{pp.first_pair_diff:+.2%}, {pp.n_pairs} pairs")

    # peer check, bench and probe AT THE SAME TIME (after session 7) ---------------------
    def sized_peer_prompt(self, h: Any, tag: str, n: int) -> tuple[str, Path]:
        """The peer prompt (``peer_in`` tokens by the server's /tokenize) and bench's custom
        dataset of it."""
        import httpx

        sp = ProbeSpec(prompt=PROMPT, prompt_tokens=self.peer_in, max_tokens=self.peer_out)
        with httpx.Client(timeout=60) as http:
            sized = DecodeProbe(sp, self.peer_out).sized_prompt(http, h, self.peer_in)
        assert sized is not None
        from vllm_bisect.probes.peer_rounds import prompts_jsonl

        jsonl = self.work / f"{tag}_prompts.jsonl"
        jsonl.write_text(prompts_jsonl(sized.text, max(64, n)))
        return sized.text, jsonl

    def concurrent_round(self, h: Any, model: str, name: str, jsonl: Path, c: int, n: int,
                         probe: Any) -> tuple[dict[str, Any], Any]:
        """Start ``vllm bench serve`` (n + c requests at c), wait for its "Starting main
        benchmark run" line, run the probe (n requests at c) at once, then wait for bench.
        Bench's extra wave keeps its load on until the probe's last request is done."""
        from vllm_bisect.probes.peer_rounds import round_record, run_concurrent

        cmd = self.bench_cmd(h, model, name, jsonl, c, n + c, warm=0)
        run = run_concurrent(cmd, {**os.environ, **ENV}, lambda: probe(n), name)
        rc, lines, m = run.rc, run.lines, run.probe
        self.save(f"{name}_stdout.txt", "$ " + " ".join(cmd) + f"\n(rc {rc})\n"
                  + "".join(lines)[-10000:])
        if rc != 0:
            raise RuntimeError(f"{name}: bench rc {rc}: {''.join(lines)[-500:]}")
        self.save(f"{name}_probe.json", m.model_dump(mode="json"))
        rec, rnd = round_record(run, json.loads((self.res / f"{name}.json").read_text()), name)
        return rec, rnd

    def stage_peer_concurrent(self) -> None:
        """On one MTP server, R rounds per concurrency C (the concurrencies interleaved round
        by round): bench at C and the probe at C at the same time on the same prompt, so both
        tools' requests share the engine's steps and the server's drift hits both alike; per
        round probe / bench - 1, then ``probes.peer.concurrent_peer_check`` per C.

        Warm-up, on every new server before the first measured round of each C: 2C full-length
        probe requests at 2C (all starting together: the plain decode shapes), then ONE
        discarded concurrent round, run exactly like a measured one (``concurrent_round``), so
        the mixed batches (a prefill landing while the other tool's requests decode) have been
        seen before a measured round: on a cold CUDA-graphs server their first use stalls the
        engine 0.75-1.9 s (docs/validation.md (g)). It is kept under the server's entry,
        ``servers[k]["warm_round"][C]``, never in ``rounds`` (so ``concurrent_peer_check`` does
        not see it); ``--no-peer-warm-round`` leaves it out.

        Resumes from its partial file (rounds from an earlier server are kept: each round is
        self-contained). Stops before a round (warm or measured) that would not fit the budget;
        a warm round only starts when it and a measured round fit."""
        from vllm_bisect.probes.peer import ConcurrentRound, concurrent_peer_check
        from vllm_bisect.probes.peer_rounds import round_need

        tag = f"peer_concurrent{self.mode_tag()}"
        concs = self.pc_concs
        per_n = {c: self.pi_block_n or max(4, 2 * c) for c in concs}
        partial = self.res / f"{tag}.partial.json"
        doc: dict[str, Any] = json.loads(partial.read_text()) if partial.exists() else {
            "concurrencies": concs, "rounds_planned": self.pc_rounds, "block_requests": per_n,
            "bench_extra_requests": "C (one more wave, so bench's load outlasts the probe)",
            "in": self.peer_in, "out": self.peer_out, "vllm": self.vllm,
            "enforce_eager": self.eager, "servers": [], "rounds": []}
        sampler = GpuSampler()
        sampler.start()
        try:
            with self.server(f"{tag}_s{len(doc['servers'])}", self.work / "mtp",
                             ["--speculative-config", MTP]) as h:
                log(f"{tag}: healthy after {h.startup_s:.1f} s")
                model = str(self.work / "mtp")
                text, jsonl = self.sized_peer_prompt(h, tag, max(per_n.values()) * 2)
                server: dict[str, Any] = {"startup_s": h.startup_s, "warmup_itl_ms": {},
                                          "warm_round": {}}
                doc["servers"].append(server)
                doc["prompt"] = text

                def probe_at(c: int) -> Any:
                    def run(k: int) -> Measurement:
                        spec = ProbeSpec(prompt=text, max_tokens=self.peer_out, requests=k,
                                         min_tokens=self.peer_min_tokens, concurrency=c,
                                         warmup=0)
                        return DecodeProbe(spec, self.peer_out).measure(h)
                    return run

                took: list[float] = []
                doc.pop("stopped", None)
                # round by round, the concurrencies interleaved; rounds already done skipped
                for r, c in [(r, c) for r in range(self.pc_rounds) for c in concs]:
                    done = sum(1 for x in doc["rounds"] if x["concurrency"] == c)
                    if done > r:
                        continue
                    warm = self.pc_warm_round and str(c) not in server["warm_round"]
                    need = round_need(took, warm)
                    if self.left() < need:
                        doc["stopped"] = (f"before {'the warm round and ' if warm else ''}round "
                                          f"{r} at c={c}: {self.left():.0f} s left < "
                                          f"{need:.0f} s")
                        log(f"{tag}: {doc['stopped']}")
                        break
                    if str(c) not in server["warmup_itl_ms"]:
                        # both tools' load at once: 2C requests at 2C, full length
                        server["warmup_itl_ms"][str(c)] = probe_at(2 * c)(2 * c).itl_ms
                    if warm:
                        # one discarded round, as measured ones run: the mixed batches' first use
                        t = time.monotonic()
                        k = len(doc["servers"]) - 1
                        rec, rnd = self.concurrent_round(h, model, f"{tag}_s{k}_c{c}_warm", jsonl,
                                                         c, per_n[c], probe_at(c))
                        took.append(time.monotonic() - t)
                        server["warm_round"][str(c)] = {"took_s": round(took[-1], 1), **rec}
                        self.save(partial.name, doc)
                        log(f"{tag}: c={c} warm round (discarded): probe {rnd.probe_itl_ms:.3f} "
                            f"bench all {rnd.bench_tpot_all_ms:.3f} ms/token: {rnd.diff:+.2%}, "
                            f"longest bench TTFT {rec['bench_max_ttft_s']:.3f} s, gap "
                            f"{rec['bench_max_gap_s']:.3f} s ({took[-1]:.1f} s)")
                        if self.left() < max(took) + 10.0:
                            doc["stopped"] = (f"after the warm round at c={c}: {self.left():.0f}"
                                              f" s left < {max(took) + 10.0:.0f} s")
                            log(f"{tag}: {doc['stopped']}")
                            break
                    t = time.monotonic()
                    name = f"{tag}_c{c}_r{done:02d}"
                    rec, rnd = self.concurrent_round(h, model, name, jsonl, c, per_n[c],
                                                     probe_at(c))
                    took.append(time.monotonic() - t)
                    doc["rounds"].append({"concurrency": c, "round": done,
                                          "server": len(doc["servers"]) - 1,
                                          "took_s": round(took[-1], 1), **rec})
                    self.save(partial.name, doc)
                    inside = rnd.inside_tpot_ms if rnd.inside_tpot_ms is not None else math.nan
                    log(f"{tag}: c={c} round {done}: probe {rnd.probe_itl_ms:.3f} bench inside "
                        f"{inside:.3f} (all {rnd.bench_tpot_all_ms:.3f}) ms/token: "
                        f"{rnd.diff:+.2%}, chunk {rnd.chunk_diff:+.2%}, coverage "
                        f"{rnd.coverage:.3f} ({took[-1]:.1f} s)")
        finally:
            sampler.stop()
            self.save(f"{tag}_gpustate_samples.json", sampler.samples)
        doc["results"] = {}
        for c in concs:
            rounds = [ConcurrentRound.from_dict(x) for x in doc["rounds"] if x["concurrency"] == c]
            if rounds:
                doc["results"][str(c)] = concurrent_peer_check(rounds).as_dict()
        self.save(partial.name, doc)
        self.save(f"{tag}_summary.md", concurrent_summary(doc))
        if any(sum(1 for x in doc["rounds"] if x["concurrency"] == c) < self.pc_rounds
               for c in concs):
            # no final file: the next call resumes from the partial one (with a new server)
            log(f"{tag}: rounds missing (budget); run the stage again to add them")
        else:
            self.save(f"{tag}.json", doc)
        for c, res in doc["results"].items():
            log(f"{tag}: c={c}: mean {res['mean_diff']:+.2%} (CI {_pct(res['ci_low'])}.."
                f"{_pct(res['ci_high'])}), chunk {res['chunk_mean_diff']:+.2%}, "
                f"{res['n_rounds']} rounds, min coverage {res['min_coverage']:.3f}")

    # diagnosis when A failed -----------------------------------------------------------
    def stage_diag(self) -> None:
        if not (self.res / "a.failed").exists():
            self.save("diag.json", {"skipped": "A did not fail"})
            return
        doc: dict[str, Any] = {}
        for name, extra in (("dummy_mtp", ["--load-format", "dummy", "--speculative-config", MTP]),
                            ("plain", [])):
            try:
                with self.server(f"diag_{name}", self.work / "mtp", extra) as h:
                    m = DecodeProbe(ProbeSpec(prompt=PROMPT, max_tokens=64, requests=2), 64)
                    doc[name] = {"startup_s": h.startup_s,
                                 "decode": m.measure(h).model_dump(mode="json", exclude={"requests"})}
            except Exception as err:
                doc[name] = {"error": f"{type(err).__name__}: {err}"}
        self.save("diag.json", doc)

    # B --------------------------------------------------------------------------------
    def stage_b(self) -> None:
        with self.server("B", self.work / "mtp128", ["--speculative-config", MTP]) as h:
            port = int(h.url.rsplit(":", 1)[1])
            model = str(self.work / "mtp128")
            log(f"B healthy after {h.startup_s:.1f} s")
            before = vllm_lines(get(port, "/metrics"))
            base = {"model": model, "temperature": 0, "stream": True, "ignore_eos": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            caps: dict[str, Any] = {}
            caps["chat_stream_no_max_tokens"] = capture(port, "POST", "/v1/chat/completions", {
                **base, "messages": [{"role": "user", "content": PROMPT}]})
            caps["completions_stream_no_max_tokens"] = capture(port, "POST", "/v1/completions", {
                **base, "prompt": PROMPT})
            caps["completions_stream_max512_min512"] = capture(port, "POST", "/v1/completions", {
                **base, "prompt": PROMPT, "max_tokens": 512, "min_tokens": 512})
            caps["completions_stream_max512"] = capture(port, "POST", "/v1/completions", {
                **base, "prompt": PROMPT, "max_tokens": 512})
            caps["chat_stream_max512"] = capture(port, "POST", "/v1/chat/completions", {
                **base, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 512})
            time.sleep(1.5)
            after = vllm_lines(get(port, "/metrics"))
            self.save("sse_mtp_k3_qwen3next_gencfg_cap128.json", caps)
            self.save("metrics_B.txt", "########## B_mtp_qwen3next_cap128: before requests\n"
                      + before + "########## B_mtp_qwen3next_cap128: after requests\n" + after)
            # the probe as a bisect would run it for the length symptom: no max_tokens sent
            probes: dict[str, Any] = {}
            capped = not caps["chat_stream_no_max_tokens"].get("truncated_by_deadline")
            for ep in (Endpoint.COMPLETIONS, Endpoint.CHAT) if capped else ():
                sp = ProbeSpec(prompt=PROMPT, max_tokens=256, send_max_tokens=False,
                               requests=2, endpoint=ep)
                m = DecodeProbe(sp, 256).measure(h)
                probes[ep.value] = m.model_dump(mode="json")
            self.save("B.json", {"startup_s": h.startup_s, "probe_no_max_tokens": probes})

    # sweep / compare through the CLI ---------------------------------------------------
    def repo(self) -> Path:
        repo = self.work / "repo"
        if not (repo / ".git").exists():
            repo.mkdir(parents=True, exist_ok=True)
            (repo / "README").write_text("vllm 0.25.1 wheel, tiny Qwen3-Next MTP model\n")
            for c in (["git", "init", "-q"], ["git", "add", "-A"],
                      ["git", "-c", "user.email=gpu@x", "-c", "user.name=gpu", "commit", "-qm",
                       "vllm 0.25.1"]):
                subprocess.run(c, cwd=repo, check=True)
        return repo

    def spec_file(self, name: str, probe: str) -> Path:
        static = " ".join(shlex.quote(x) for x in self.common()).replace("{", "{{").replace("}", "}}")
        serve = (f"{shlex.join(self.vllm)} serve {shlex.quote(str(self.work / 'mtp'))} "
                 f"--port {{port}} {static} {{speculative}}")
        env = ", ".join(f'{k} = "{v}"' for k, v in ENV.items())
        text = (f'[range]\nrepo = "{self.repo()}"\n\n'
                f'[build]\nkind = "command"\nserve = {json.dumps(serve)}\n\n'
                f'[serve]\nmodel = "{self.work / "mtp"}"\nenv = {{ {env} }}\n'
                'speculative = { method = "mtp", num_speculative_tokens = 3 }\n\n'
                '[ops]\nstartup_timeout_s = 420\n\n'
                f"[probe]\n{probe}\n")
        p = self.work / f"{name}.toml"
        p.write_text(text)
        self.save(f"{name}.toml", text)
        return p

    def cli(self, name: str, args: list[str], timeout: float) -> None:
        cmd = [sys.executable, "-m", "vllm_bisect.cli", *args]
        t = time.monotonic()
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}",
               "VLLM_BISECT_CACHE_DIR": str(self.work / "cache")}
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            rc, so, se = r.returncode, r.stdout, r.stderr
        except subprocess.TimeoutExpired as e:
            rc, so, se = -9, str(e.stdout or ""), str(e.stderr or "")
        self.save(f"{name}_cli.txt", "$ " + " ".join(cmd) + f"\n(rc {rc}, "
                  f"{time.monotonic() - t:.0f} s)\n--- stdout ---\n{so}\n--- stderr ---\n"
                  + se[-12000:])
        for log_name in (self.work / "cache").glob("*-logs/**/*.log"):
            tag = "nospec_" if log_name.parent.name == "no-spec" else ""
            (self.res / f"{name}_{tag}{log_name.name}").write_bytes(log_name.read_bytes()[-400_000:])
        if rc != 0:
            raise RuntimeError(f"{name}: rc {rc}")
        self.save(f"{name}.json", so)

    def stage_sweep(self) -> None:
        spec = self.spec_file("sweep", f'prompt = "{PROMPT}"\nmax_tokens = 64\nwarmup = 1\n'
                              "mtp_speedup = { concurrency = [1, 4, 12], context = [2048, 32768],"
                              " requests = 8, max_tokens = 256 }")
        self.cli("sweep", ["sweep", "--spec", str(spec), "--commit", "HEAD", "--json",
                           "--out", str(self.res / "sweep")], timeout=max(60.0, self.left() - 5))

    def stage_compare(self) -> None:
        spec = self.spec_file("compare", f'prompt = "{PROMPT}"\nmax_tokens = 128\nrequests = 2\n'
                              "warmup = 1")
        self.cli("compare", ["compare", "--spec", str(spec), "--commit", "HEAD",
                             "--a-env", "VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE=1",
                             "--b-env", "VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE=0",
                             "--a-no-speculative", "--b-no-speculative",
                             "--pairs", "10", "--seed", "16", "--json"],
                 timeout=max(60.0, self.left() - 5))


STAGES = [("env", 20, "env.txt"), ("model", 30, "model_build.json"), ("a", 240, "A.json"),
          ("diag", 150, "diag.json"), ("peer", 300, "peer.json"), ("b", 90, "B.json"),
          ("sweep", 330, "sweep.json"), ("compare", 170, "compare.json"),
          ("peer_interleaved", 300, "peer_interleaved{mode}_c{conc}.json"),
          ("peer_concurrent", 120, "peer_concurrent{mode}.json")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--only", default=None)
    ap.add_argument("--peer-min-tokens", type=int, default=None,
                    help="the probe's min_tokens in the peer stage (default: = max_tokens)")
    ap.add_argument("--peer-c4-bench-first", action="store_true")
    ap.add_argument("--no-eager", action="store_true",
                    help="serve without --enforce-eager (CUDA graphs + torch.compile); "
                         "recorded as enforce_eager in the results")
    ap.add_argument("--vllm", default=None,
                    help="the vllm command (default: vllm on PATH), e.g. 'python3 -m "
                         "vllm_bisect.sim vllm' for the simulator's serve and bench serve")
    ap.add_argument("--peer-in", type=int, default=PEER_IN, help="peer prompt tokens")
    ap.add_argument("--peer-out", type=int, default=PEER_OUT, help="peer output tokens")
    ap.add_argument("--peer-conc", type=int, default=1, help="peer_interleaved's concurrency")
    ap.add_argument("--peer-pairs", type=int, default=6, help="peer_interleaved's block pairs")
    ap.add_argument("--peer-block-n", type=int, default=0,
                    help="requests per peer_interleaved block (default max(6, 2 x concurrency)) "
                         "or per peer_concurrent probe round (default max(4, 2 x concurrency))")
    ap.add_argument("--peer-conc-list", default="1,4",
                    help="peer_concurrent's concurrencies, comma-separated")
    ap.add_argument("--peer-rounds", type=int, default=4, help="peer_concurrent's rounds per C")
    ap.add_argument("--no-peer-warm-round", action="store_true",
                    help="peer_concurrent without its discarded concurrent warm-up round per C "
                         "on each new server (to see a cold server's first round)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    run = Run(a.work, a.out, a.budget_s)
    run.peer_min_tokens, run.peer_c4_bench_first = a.peer_min_tokens, a.peer_c4_bench_first
    run.eager = not a.no_eager
    if a.vllm:
        run.vllm = shlex.split(a.vllm)
    run.peer_in, run.peer_out = a.peer_in, a.peer_out
    run.pi_conc, run.pi_pairs, run.pi_block_n = a.peer_conc, a.peer_pairs, a.peer_block_n
    run.pc_concs = [int(x) for x in a.peer_conc_list.split(",") if x.strip()]
    run.pc_rounds = a.peer_rounds
    run.pc_warm_round = not a.no_peer_warm_round
    only = set(a.only.split(",")) if a.only else None
    for name, estimate, pattern in STAGES:
        marker = pattern.format(conc=a.peer_conc, mode=run.mode_tag())
        if only is not None and name not in only:
            continue
        if (run.res / marker).exists() or (run.res / f"{name}.failed").exists():
            log(f"{name}: already done")
            continue
        if run.left() < estimate:
            log(f"{name}: skipped, {run.left():.0f} s left < {estimate} s")
            continue
        log(f"{name}: start ({run.left():.0f} s left)")
        try:
            getattr(run, f"stage_{name}")()
            log(f"{name}: done")
        except Exception as err:
            log(f"{name}: FAILED {type(err).__name__}: {err}")
            run.save(f"{name}.failed", f"{type(err).__name__}: {err}")
        run.pack()
    run.pack()


if __name__ == "__main__":
    main()
