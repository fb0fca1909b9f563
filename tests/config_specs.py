"""Specs for bisecting a serve-configuration history (used on the simulator and on real vLLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_bisect.sim.config_history import ConfigHistory
from vllm_bisect.spec import BisectSpec, parse_spec

PROMPT = " ".join(["hello"] * 20)  # 20 prompt tokens; ngram drafts from the repetition


def config_spec(h: ConfigHistory, symptom: str, env: dict[str, str], startup_timeout_s: float,
                requests: int = 2) -> BisectSpec:
    data: dict[str, Any] = {
        "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
        "build": {"kind": "command", "serve": "sh serve.sh {port}"},
        "serve": {"model": "tiny", "env": env},
        "ops": {"startup_timeout_s": startup_timeout_s},
    }
    if symptom == "itl":
        data["probe"] = {"prompt": PROMPT, "max_tokens": 256, "requests": requests, "warmup": 1}
        data["verdict"] = {"symptom": "itl", "itl_factor": 2.0, "strategy": "threshold"}
    else:  # length: the probe relies on server defaults, as chat clients do
        data["probe"] = {"prompt": PROMPT, "endpoint": "chat", "send_max_tokens": False,
                         "max_tokens": None, "requests": requests, "warmup": 1}
        data["verdict"] = {"symptom": "length", "min_output_tokens": 256, "intermittent_runs": 1}
    return parse_spec(data, source=f"config history ({symptom})")


def fake_model_dir(path: Path) -> Path:
    """A model directory for the simulator (it only reads generation_config.json)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    return path
