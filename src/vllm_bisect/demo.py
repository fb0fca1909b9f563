"""The embedded demo: a synthetic vLLM history with a planted #47297-style cap (no printing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.sim.history import History, HistoryPlan, generate_history, sim_path
from vllm_bisect.spec import BisectSpec, parse_spec

DEMO_PLAN = HistoryPlan(n_commits=64, cap_at=41, unbuildable=(32, 47), step_ms=8.0,
                        acceptance=0.8, init_s=0.2, seed=47297)
DEMO_MODEL = "Qwen/Qwen3.6-35B-A3B-NVFP4"


@dataclass(frozen=True)
class Demo:
    history: History
    spec: BisectSpec


def make_demo(workdir: Path, plan: HistoryPlan = DEMO_PLAN) -> Demo:
    history = generate_history(workdir / "vllm", plan)
    spec = parse_spec({
        "range": {"repo": str(history.path), "good": history.good, "bad": history.bad},
        "build": {"kind": "source"},
        "ops": {"startup_timeout_s": 60},
        "serve": {"model": DEMO_MODEL,
                  "env": {"VLLM_BISECT_SIM_PATH": sim_path()},
                  "speculative": {"method": "mtp", "num_speculative_tokens": 3}},
        "probe": {"endpoint": "completions", "max_tokens": 256, "requests": 2, "warmup": 1},
        "verdict": {"symptom": "length"},
    }, source="demo")
    return Demo(history=history, spec=spec)
