#!/usr/bin/env python3
"""The probe's noise on the GPU (issue 53, item 2): several servers of ONE commit, many
requests each, in turns of a few set-ups, each server's every request kept in order.

    python3 scripts/gpu53/noise.py WORK RES --spec WORK/host-cp.toml [--budget-s S]
                                   [--requests 24] [--order plain,pinned,plain,...]

The commit: a venv the bisect jobs built under WORK/cache/venvs/*/SHA (the kind's good end
first, else the newest). Set-ups, each a fresh `vllm serve` with the spec's model, arguments,
env and speculative config (the command vllm-bisect runs):

- ``plain``: as vllm-bisect starts it;
- ``pinned``: the server (API server and engine core: taskset is inherited) on cores 0-3 and
  the probe on the last two cores (``taskset -c``; fewer on a smaller machine);
- ``contended``: plain, with one busy loop per CPU core running beside it (host contention).

Each server runs ``--requests`` requests with no warm-up (vllm-bisect's DecodeProbe, as
``vllm-bisect probe`` does), so the first requests after a start can be told from later ones.
After every server RES/noise.json is rewritten: each server's per-request ITL (ms, in order),
start-up seconds, and per set-up: the per-request CV (all requests; without the first 1 and
3, as a warm-up of 1 or 3 would drop them), the server-level CV of the servers' means. A server
is not started when the budget left is under the slowest server so far (+ 15 s).
GPU clocks are not locked: the device's rules leave the accelerator's settings as they are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

T0 = time.monotonic()
ALL_CPUS = set(os.sched_getaffinity(0))
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def log(msg: str) -> None:
    print(f"[noise {time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def venv_for(work: Path, prefer: list[str]) -> Path | None:
    found = sorted((work / "cache" / "venvs").glob("*/*/bin/vllm"),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for sha in prefer:
        for v in found:
            if v.parent.parent.name == sha:
                return v
    return found[0] if found else None


def cv(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    return statistics.stdev(xs) / statistics.mean(xs)


def summary(servers: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for setup in sorted({s["setup"] for s in servers}):
        mine = [s for s in servers if s["setup"] == setup and s.get("itl_ms")]
        if not mine:
            continue
        row: dict[str, Any] = {"servers": len(mine)}
        for skip in (0, 1, 3):
            per = [cv(s["itl_ms"][skip:]) for s in mine]
            per_ok = [c for c in per if c is not None]
            means = [statistics.mean(s["itl_ms"][skip:]) for s in mine if s["itl_ms"][skip:]]
            row[f"skip{skip}"] = {
                "per_request_cv_each": [round(c, 4) for c in per_ok],
                "per_request_cv_mean": round(statistics.mean(per_ok), 4) if per_ok else None,
                "server_means_ms": [round(m, 4) for m in means],
                "server_cv": round(cv(means), 4) if len(means) > 1 else None}  # type: ignore[arg-type]
        firsts = [s["itl_ms"][0] / statistics.median(s["itl_ms"][3:]) for s in mine
                  if len(s["itl_ms"]) > 4]
        row["first_request_over_median"] = [round(x, 4) for x in firsts]
        row["startup_s"] = [s.get("startup_s") for s in mine]
        out[setup] = row
    return out


def busy(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(n)]


def one_server(k: int, setup: str, vllm: Path, spec: dict[str, Any], work: Path,
               requests: int) -> dict[str, Any]:
    from vllm_bisect.probes.decode import DecodeProbe
    from vllm_bisect.runtime.base import ServerHandle
    from vllm_bisect.spec import OpsSpec, ProbeSpec

    serve, probe = spec["serve"], spec.get("probe", {})
    port = free_port()
    argv = [str(vllm), "serve", serve["model"], "--host", "127.0.0.1", "--port", str(port),
            *serve.get("args", [])]
    if serve.get("speculative"):
        argv += ["--speculative-config", json.dumps(serve["speculative"], separators=(",", ":"))]
    if setup == "pinned":   # the server on the first 4 cores (of 16), the probe on the last 2
        last = max(ALL_CPUS)
        argv = ["taskset", "-c", f"0-{max(0, min(3, last // 2 - 1))}", *argv]
        os.sched_setaffinity(0, {last - 1, last} if last >= 3 else {last})
    else:
        os.sched_setaffinity(0, ALL_CPUS)
    env = {**os.environ, **serve.get("env", {}), "VIRTUAL_ENV": str(vllm.parent.parent)}
    logf = work / "noise" / f"serve-{k}-{setup}.log"
    logf.parent.mkdir(parents=True, exist_ok=True)
    hogs: list[subprocess.Popen[bytes]] = []
    rec: dict[str, Any] = {"k": k, "setup": setup, "commit": vllm.parent.parent.name[:12],
                           "argv": " ".join(argv)}
    t = time.monotonic()
    with open(logf, "w") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"server exited {p.returncode} (log {logf})")
            if time.monotonic() - t > 400:
                raise RuntimeError("not healthy in 400 s")
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(1)
        rec["startup_s"] = round(time.monotonic() - t, 1)
        if setup == "contended":
            hogs = busy(len(ALL_CPUS))
        ps = ProbeSpec(**{**probe, "requests": requests, "warmup": 0, "concurrency": 1})
        t1 = time.monotonic()
        m = DecodeProbe(ps, ops=OpsSpec()).measure(ServerHandle(url=url, model=serve["model"]))
        rec["probe_wall_s"] = round(time.monotonic() - t1, 1)
        rec["itl_ms"] = [r.itl_ms for r in m.requests if r.itl_ms]
        rec["latency_ms"] = [round(r.latency_ms, 1) for r in m.requests]
        rec["ttft_ms"] = [round(r.ttft_ms, 2) for r in m.requests]
        rec["output_tokens"] = [r.output_tokens for r in m.requests]
        rec["tokens_per_chunk"] = [round(r.tokens_per_chunk, 3) for r in m.requests]
        rec["itl_ms_server"] = m.itl_ms
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        with_grace(p)
        rec["lifetime_s"] = round(time.monotonic() - t, 1)
    return rec


def with_grace(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("res", type=Path)
    ap.add_argument("--spec", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=500.0)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--order", default="plain,pinned,plain,pinned,contended,plain,pinned,"
                                        "plain,pinned,contended")
    a = ap.parse_args()
    spec = tomllib.loads(a.spec.read_text())
    planted = a.res / "host.planted.json"
    prefer = json.loads(planted.read_text())["shas"][:1] if planted.exists() else []
    vllm = venv_for(a.work, prefer)
    out = a.res / "noise.json"
    doc: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {"servers": []}
    if vllm is None:
        log("no built venv under cache/venvs: nothing to serve")
        doc["error"] = "no built venv"
        out.write_text(json.dumps(doc, indent=2) + "\n")
        sys.exit(3)
    log(f"commit {vllm.parent.parent.name[:12]} ({vllm})")
    order = [s for s in a.order.split(",") if s][len(doc["servers"]):]
    slowest = float(os.environ.get("NOISE_FIRST_GUESS_S", "110"))
    for setup in order:
        left = a.budget_s - (time.monotonic() - T0)
        if left < slowest + 15:
            log(f"{left:.0f} s left, under the slowest server ({slowest:.0f} s): stop")
            break
        k = len(doc["servers"])
        try:
            rec = one_server(k, setup, vllm, spec, a.work, a.requests)
        except Exception as err:  # keep the servers before it
            rec = {"k": k, "setup": setup, "error": repr(err)}
        slowest = max(slowest, float(rec.get("lifetime_s") or 0))
        itl = rec.get("itl_ms") or []
        log(f"server {k} {setup}: start {rec.get('startup_s')} s, {len(itl)} requests, "
            f"ITL mean {statistics.mean(itl) if itl else math.nan:.4f} ms, "
            f"CV {cv(itl) or math.nan:.4f}{', ' + rec['error'] if 'error' in rec else ''}")
        doc["servers"].append(rec)
        doc["summary"] = summary(doc["servers"])
        with contextlib.suppress(OSError):
            doc.setdefault("gpu", []).append(subprocess.run(
                ["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,"
                 "power.draw", "--format=csv,noheader"],
                capture_output=True, text=True).stdout.strip())
        out.write_text(json.dumps(doc, indent=2) + "\n")
    log(json.dumps(doc.get("summary"), indent=1))


if __name__ == "__main__":
    main()
