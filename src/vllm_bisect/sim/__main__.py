"""``python -m vllm_bisect.sim serve|replay ...``: the simulator and the replay server."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from vllm_bisect.sim.engine import SimConfig


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m vllm_bisect.sim",
                                 description="A vLLM-compatible server for tests and demos.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("vllm", help="`vllm serve MODEL [flags]` compatible entry (see vllm_compat); "
                   "`vllm bench serve [flags]` runs the simulator's bench (sim.bench)")
    s = sub.add_parser("serve", help="serve a simulated vLLM engine")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--model", default="sim-model")
    s.add_argument("--version", default="0.25.1")
    s.add_argument("--max-model-len", type=int, default=4096)
    s.add_argument("--step-ms", type=float, default=10.0, help="engine step time")
    s.add_argument("--prefill-ms", type=float, default=20.0)
    s.add_argument("--spec-k", type=int, default=0, help="draft tokens per step (0: none)")
    s.add_argument("--acceptance", type=float, default=0.8, help="per-draft acceptance rate")
    s.add_argument("--gen-max-new-tokens", type=int, default=None,
                   help="generation_config.json max_new_tokens (a default max_tokens)")
    s.add_argument("--gen-caps-explicit", action="store_true",
                   help="old behaviour (before vLLM #34063): max_new_tokens caps explicit max_tokens")
    s.add_argument("--spec-output-cap", type=int, default=None,
                   help="cap every output at N tokens under speculative decoding")
    s.add_argument("--eos-after", type=int, default=None)
    s.add_argument("--startup-delay", type=float, default=0.0)
    s.add_argument("--first-request-delay", type=float, default=0.0)
    s.add_argument("--crash-after-tokens", type=int, default=None)
    s.add_argument("--noise-cv", type=float, default=0.0)
    s.add_argument("--server-cv", type=float, default=0.0,
                   help="this server start's own speed level: step time x N(1, CV), drawn "
                        "once at start-up (server-level noise)")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--cuda-graphs", action="store_true",
                   help="profiled decode steps launch their kernels as one CUDA graph")
    s.add_argument("--profiler-dir", default=os.environ.get("VLLM_TORCH_PROFILER_DIR") or None,
                   help="serve /start_profile and /stop_profile; traces go here "
                        "(default: $VLLM_TORCH_PROFILER_DIR)")
    s.add_argument("--prompt-seeded-acceptance", action="store_true",
                   help="greedy requests with the same prompt repeat their draft acceptances "
                        "(as real MTP does)")
    s.add_argument("--merge-lagging-outputs", action="store_true",
                   help="steps already due when a chunk would be written go out as one chunk "
                        "(as vLLM merges a lagging request's outputs)")
    h = sub.add_parser("source-history", help="a git history from a vLLM source tree with one "
                       "regression planted in vLLM's code (truth in OUT.planted.json)")
    h.add_argument("src", type=Path, help="an unpacked vLLM sdist, or the .tar.gz")
    h.add_argument("out", type=Path)
    h.add_argument("--kind", choices=["cap", "spec", "host", "csrc"], required=True)
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--commits", type=int, default=25, help="commits after the imported tree")
    r = sub.add_parser("replay", help="replay a captured vLLM transcript")
    r.add_argument("transcript", type=Path)
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", type=int, default=8000)
    r.add_argument("--metrics", type=Path, default=None, help="captured metrics file")
    r.add_argument("--metrics-server", default=None, help="server block in the metrics file")
    r.add_argument("--speed", type=float, default=1.0, help="replay faster (>1) or slower")
    r.add_argument("--record", default=None, help="always answer POSTs with this record")
    return ap


def config_from_args(a: argparse.Namespace) -> SimConfig:
    return SimConfig(
        model=a.model, version=a.version, max_model_len=a.max_model_len, step_ms=a.step_ms,
        prefill_ms=a.prefill_ms, spec_k=a.spec_k, acceptance=a.acceptance,
        gen_max_new_tokens=a.gen_max_new_tokens, gen_caps_explicit=a.gen_caps_explicit,
        spec_output_cap=a.spec_output_cap, eos_after=a.eos_after, startup_delay_s=a.startup_delay,
        first_request_delay_s=a.first_request_delay, crash_after_tokens=a.crash_after_tokens,
        noise_cv=a.noise_cv, server_cv=a.server_cv, seed=a.seed,
        prompt_seeded_acceptance=a.prompt_seeded_acceptance,
        merge_lagging_outputs=a.merge_lagging_outputs, profiler_dir=a.profiler_dir,
        cuda_graphs=a.cuda_graphs,
    )


def main(argv: list[str] | None = None) -> None:
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args[:3] == ["vllm", "bench", "serve"]:
        from vllm_bisect.sim import bench

        bench.main(args[3:])
        return
    if args[:1] == ["vllm"]:
        from vllm_bisect.sim.vllm_compat import main as vllm_main

        vllm_main(args[1:])
        return
    a = build_parser().parse_args(args)
    if a.cmd == "source-history":
        import json

        from vllm_bisect.sim.source_history import PlantKind, make_source_history

        h = make_source_history(a.src, a.out, PlantKind(a.kind), a.seed, a.commits)
        print(json.dumps({"repo": str(h.path), "good": h.good, "bad": h.bad,
                          "commits": len(h.shas) - 1}))
        return
    if a.cmd == "serve":
        from vllm_bisect.sim.server import run

        run(config_from_args(a), a.host, a.port)
    else:
        from vllm_bisect.sim.replay import ReplayServer, load_metrics_blocks, serve

        metrics = None
        if a.metrics is not None:
            metrics = load_metrics_blocks(a.metrics, a.metrics_server or "A_ngram_tiny")
        asyncio.run(serve(ReplayServer(a.transcript, metrics, a.speed, a.record), a.host, a.port))


if __name__ == "__main__":
    main()
