"""``python -m vllm_bisect.sim vllm serve MODEL [vllm serve flags]``: the simulator behind
vLLM's own command line, so one serve script runs against real vLLM or the simulator.

It reads what real vLLM reads: ``--speculative-config`` JSON (``num_speculative_tokens``),
``--served-model-name``, ``--max-model-len``, ``--generation-config`` (``auto`` reads
``MODEL/generation_config.json``; ``vllm`` ignores it), and ``max_new_tokens`` from that file.
Flags it does not model (``--enforce-eager``, ``--gpu-memory-utilization``, ...) are accepted
and ignored. Pacing comes from the environment (``VLLM_SIM_STEP_MS``, ``VLLM_SIM_SPEC_STEP_MS``,
``VLLM_SIM_ACCEPTANCE``, ``VLLM_SIM_STARTUP_S``, ``VLLM_SIM_SHUTDOWN_S``: seconds from
SIGTERM to exit); ``VLLM_SIM_PROMPT_SEEDED=1`` makes greedy
requests repeat their draft acceptances per prompt, as real MTP does; ``VLLM_SIM_MERGE_LAGGING=1``
sends steps that are already due as one chunk, as vLLM merges a lagging request's outputs;
``VLLM_SIM_DRIFT=A:P`` drifts the whole server's speed by ±A (a fraction) with a period of P
seconds, as real vLLM's host-bound speed drifted on the H200 (docs/validation.md (f));
``VLLM_SIM_COLD_STALLS=N:S`` pauses the whole server S seconds the first N times a request's
prefill starts while another request is decoding, as a cold CUDA-graphs server stalled on new
batch shapes (first-use compiles, docs/validation.md (g)); default off. ``/v1/models`` lists
the served name with MODEL as its ``root``, as vLLM does; ``VLLM_SIM_ANY_MODEL=1`` answers a
request for any model name (streaming its own), as a router in front of another model would.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from vllm_bisect.sim.engine import SimConfig


def parse(argv: list[str]) -> SimConfig:
    ap = argparse.ArgumentParser(prog="vllm")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("model")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name", default=None)
    s.add_argument("--speculative-config", default=None)
    s.add_argument("--generation-config", default="auto")
    s.add_argument("--max-model-len", type=int, default=4096)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--enforce-eager", action="store_true")
    args, _unknown = ap.parse_known_args(argv)
    spec_k = 0
    if args.speculative_config:
        spec_k = int(json.loads(args.speculative_config).get("num_speculative_tokens", 1))
    max_new = None
    gen_path = Path(args.model) / "generation_config.json"
    if args.generation_config == "auto" and gen_path.is_file():
        max_new = json.loads(gen_path.read_text()).get("max_new_tokens")
    env = os.environ
    drift_a, _, drift_p = env.get("VLLM_SIM_DRIFT", "0:20").partition(":")
    stalls_n, _, stall_s = env.get("VLLM_SIM_COLD_STALLS", "0:0").partition(":")
    step = float(env.get("VLLM_SIM_SPEC_STEP_MS" if spec_k else "VLLM_SIM_STEP_MS",
                         "4.0" if spec_k else "2.5"))
    return SimConfig(
        model=args.served_model_name or args.model,
        root=args.model,
        answer_any_model=env.get("VLLM_SIM_ANY_MODEL", "0") == "1",
        max_model_len=args.max_model_len,
        step_ms=step,
        spec_k=spec_k,
        acceptance=float(env.get("VLLM_SIM_ACCEPTANCE", "1.0")),
        gen_max_new_tokens=max_new,
        startup_delay_s=float(env.get("VLLM_SIM_STARTUP_S", "0.2")),
        shutdown_delay_s=float(env.get("VLLM_SIM_SHUTDOWN_S") or 0),
        seed=args.seed,
        prompt_seeded_acceptance=env.get("VLLM_SIM_PROMPT_SEEDED", "0") == "1",
        merge_lagging_outputs=env.get("VLLM_SIM_MERGE_LAGGING", "0") == "1",
        drift_amplitude=float(drift_a), drift_period_s=float(drift_p or 20),
        cold_stalls=int(stalls_n or 0), cold_stall_s=float(stall_s or 0),
        cuda_graphs=not args.enforce_eager,
        extra={"host": args.host, "port": args.port},
    )


def main(argv: list[str]) -> None:
    from vllm_bisect.sim.server import run

    cfg = parse(argv)
    run(cfg, str(cfg.extra["host"]), int(cfg.extra["port"]))
