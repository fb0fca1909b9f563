"""Running the peer checks against ``vllm bench serve`` on one server (``probes.peer`` judges
what they measured): bench's command on the probe's own prompt, the blocks of the interleaved
(ABBA) check as records, the budget rule that keeps its pairs balanced, and one concurrent
round (bench and the probe AT THE SAME TIME: the probe starts when bench prints "Starting
main benchmark run"). scripts/gpu_mtp_run.py runs them on the GPU (and, with ``--vllm``, on
the simulator: tests/probes/test_peer_interleaved.py, test_peer_concurrent.py).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_bisect.models import Measurement
from vllm_bisect.probes.peer import PeerBlock, PeerSide, bench_block, probe_block
from vllm_bisect.probes.peer_concurrent import ConcurrentRound, concurrent_round
from vllm_bisect.probes.peer_stats import bench_tokens_per_chunk

__all__ = ["ConcurrentRun", "bench_serve_argv", "block_of_bench", "block_of_probe",
           "first_use_stall", "pairs_fit", "prompts_jsonl", "round_need", "round_record",
           "run_concurrent"]

# the phrase `vllm bench serve` prints when its measured requests start
MAIN_RUN = "Starting main benchmark run"


def bench_serve_argv(vllm: Sequence[str], url: str, model: str, jsonl: Path, out_len: int,
                     conc: int, n: int, warm: int, result_dir: Path, name: str) -> list[str]:
    """``vllm bench serve`` on the prompts of ``jsonl`` (a custom dataset: the probe's own
    prompt), ``out_len`` tokens each (--ignore-eos), greedy, its detailed result in
    ``result_dir/name.json``."""
    return [*vllm, "bench", "serve", "--backend", "vllm", "--base-url", url,
            "--endpoint", "/v1/completions", "--model", model, "--tokenizer", model,
            "--dataset-name", "custom", "--dataset-path", str(jsonl), "--skip-chat-template",
            "--disable-shuffle", "--custom-output-len", str(out_len),
            "--num-prompts", str(n), "--max-concurrency", str(conc), "--ignore-eos",
            "--temperature", "0", "--num-warmups", str(warm), "--save-result",
            "--save-detailed", "--result-dir", str(result_dir), "--result-filename",
            f"{name}.json"]


def prompts_jsonl(text: str, n: int) -> str:
    """Bench's custom dataset: ``n`` lines of the same prompt."""
    return "".join(json.dumps({"prompt": text}) + "\n" for _ in range(n))


# -- interleaved blocks (ABBA) ----------------------------------------------------------------
def block_of_bench(doc: Mapping[str, Any]) -> tuple[PeerBlock, PeerBlock, dict[str, Any]]:
    """A bench block: per token (TPOT), per chunk (its mean ITL), and what the record keeps."""
    side = PeerSide.BENCH
    rec: dict[str, Any] = {"mean_tpot_ms": doc["mean_tpot_ms"], "mean_itl_ms": doc["mean_itl_ms"],
                           "duration_s": doc.get("duration")}
    return bench_block(doc), PeerBlock(side, float(doc["mean_itl_ms"])), rec


def block_of_probe(m: Measurement) -> tuple[PeerBlock, PeerBlock, dict[str, Any]]:
    """A probe block: per token (mean itl_ms), per chunk (mean chunk_itl_ms), the record."""
    blk = probe_block(m)
    chunk = PeerBlock(PeerSide.PROBE, statistics.fmean(
        r.chunk_itl_ms for r in m.requests if r.chunk_itl_ms is not None))
    rec = {"mean_itl_ms": blk.mean_ms, "mean_chunk_itl_ms": chunk.mean_ms,
           "server_itl_ms": m.server_itl_ms, "tokens_per_chunk": m.tokens_per_chunk}
    return blk, chunk, rec


def pairs_fit(block: int, took: Mapping[PeerSide, Sequence[float]], left_s: float) -> str | None:
    """Before each quad of blocks (two pairs, so the pairs stay balanced): None when two more
    pairs fit the time left (each side's longest block so far, twice, + 10 s), else why not."""
    if not block or block % 4:
        return None
    need = 2 * (max(took[PeerSide.BENCH]) + max(took[PeerSide.PROBE])) + 10
    if left_s >= need:
        return None
    return f"before block {block}: {left_s:.0f} s left < {need:.0f} s for two more pairs"


# -- concurrent rounds --------------------------------------------------------------------------
def round_need(took: Sequence[float], warm: bool) -> float:
    """Seconds the next concurrent round needs (the longest so far, + 10 s), twice when a
    discarded warm round runs before it."""
    est = max(took) if took else 0.0
    return (2 * est if warm else est) + 10.0


@dataclass(frozen=True)
class ConcurrentRun:
    """One bench run with the probe inside it: bench's output, exit code, its launch and the
    moment it began its main run, and the probe's window (all ``time.perf_counter``)."""

    probe: Measurement
    lines: tuple[str, ...]
    rc: int
    launched: float
    started: float
    window: tuple[float, float]


def run_concurrent(cmd: Sequence[str], env: Mapping[str, str],
                   probe: Callable[[], Measurement], name: str) -> ConcurrentRun:
    """Start bench (``cmd``), wait for its main run to start, run ``probe`` at once, then wait
    for bench (killed if it outlives its timeouts). A bench that never starts its main run is
    an error (RuntimeError, with its output's tail)."""
    launched = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**env, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    began = threading.Event()
    at: list[float] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if MAIN_RUN in line and not began.is_set():
                at.append(time.perf_counter())
                began.set()
        began.set()  # EOF without the line: do not wait for it

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        began.wait(timeout=300)
        if not at:
            raise RuntimeError(f"{name}: bench never started its main run: "
                               f"{''.join(lines)[-800:]}")
        t0 = time.perf_counter()
        m = probe()
        t1 = time.perf_counter()
        rc = proc.wait(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    return ConcurrentRun(m, tuple(lines), rc, launched, at[0], (t0, t1))


def round_record(run: ConcurrentRun, bench: Mapping[str, Any],
                 name: str) -> tuple[dict[str, Any], ConcurrentRound]:
    """One concurrent round from bench's ``--save-detailed`` document and the run: the round
    (``probes.peer.concurrent_round``) and its record (files, timing, stalls)."""
    m, (t0, t1), launched = run.probe, run.window, run.launched
    rnd = concurrent_round(bench, m, (t0, t1))
    rec = {"bench_file": f"{name}.json", "probe_file": f"{name}_probe.json",
           "bench_startup_s": round(run.started - launched, 2),
           "probe_window_s": [round(t0 - launched, 3), round(t1 - launched, 3)],
           "bench_first_request_after_probe_start_s": round(
               min(bench["start_times"]) - t0, 4) if bench.get("start_times") else None,
           "server_itl_ms": m.server_itl_ms, "tokens_per_chunk": m.tokens_per_chunk,
           # a stall (a cold server's first-use compile) shows here: bench's longest TTFT
           # and chunk gap, the probe's longest TTFT
           "bench_max_ttft_s": max(bench.get("ttfts") or [0.0]),
           "bench_max_gap_s": max((g for x in bench.get("itls") or [] for g in x), default=0.0),
           "probe_max_ttft_ms": max((x.ttft_ms for x in m.requests), default=0.0),
           "bench_median_ttft_s": statistics.median(bench.get("ttfts") or [0.0]),
           "probe_median_ttft_ms": statistics.median([x.ttft_ms for x in m.requests] or [0.0]),
           # identical prompts: the same tokens per chunk on both sides unless the shared
           # batch changed the greedy numerics
           "bench_tokens_per_chunk": bench_tokens_per_chunk(bench), **rnd.as_dict()}
    return rec, rnd


# a first-use stall (a cold server compiling a new batch shape: 0.75-1.9 s on the H200,
# docs/validation.md (g)) lands in a request's TTFT: the one whose prefill made the new shape
STALL_FACTOR = 5.0     # a TTFT this many times the round's median TTFT ...
STALL_FLOOR_S = 0.1    # ... and this much longer than it


def first_use_stall(rec: Mapping[str, Any]) -> str | None:
    """Why a round's record shows a first-use stall (bench's or the probe's longest TTFT far
    above that side's median), or None. The discarded warm round is meant to take the stalls,
    but it takes them only when its requests made the mixed batches: bench and the probe in
    lockstep (each prefill with the other's) make none, and the stall moves to a measured
    round."""
    for side, longest, median in (
            ("bench", rec["bench_max_ttft_s"], rec["bench_median_ttft_s"]),
            ("probe", rec["probe_max_ttft_ms"] / 1000.0, rec["probe_median_ttft_ms"] / 1000.0)):
        if longest > max(STALL_FACTOR * median, median + STALL_FLOOR_S):
            return (f"{side}'s longest TTFT {longest:.3f} s against its median "
                    f"{median:.3f} s: a first-use stall")
    return None
