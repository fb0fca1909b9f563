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
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the gpu_mtp package beside it

from gpu_mtp.common import PEER_IN, PEER_OUT, log
from gpu_mtp.run import Run

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
