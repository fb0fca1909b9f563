"""``Run``: one WORK folder's stages (a stage whose result exists is not run again):
env, model, A, diag, B, sweep, compare; the peer stages come from ``PeerStages``."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from gpu_mtp.common import (
    COMMON,
    ENV,
    MTP,
    PEER_IN,
    PEER_OUT,
    PROMPT,
    ROOT,
    T0,
    capture,
    get,
    log,
    vllm_lines,
)
from gpu_mtp.peer_stages import PeerStages
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.runtime.process import LaunchPlan, free_port, run_server
from vllm_bisect.spec import Endpoint, ProbeSpec


# -- stages --------------------------------------------------------------------------------
class Run(PeerStages):
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
