"""Specs for the studies' synthetic histories: command builds (no venv) or source builds."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from vllm_bisect.sim.history import History, sim_path
from vllm_bisect.spec import BisectSpec, parse_spec

MTP = '{{"method":"mtp","num_speculative_tokens":3}}'  # (doubled braces: a serve template)


def command_spec(h: History, **over: dict[str, Any]) -> BisectSpec:
    """Serve the checkout in place: `python -m vllm.entrypoints.cli.main serve` from its
    directory; the build compiles it (a syntax error is a build failure)."""
    data: dict[str, Any] = {
        "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
        "build": {"kind": "command", "setup": f"{sys.executable} -m compileall -q vllm",
                  "serve": f"{sys.executable} -m vllm.entrypoints.cli.main serve {{model}} "
                           f"--port {{port}} --speculative-config '{MTP}'"},
        "serve": {"model": "sim-model", "env": {"VLLM_BISECT_SIM_PATH": sim_path()}},
        "probe": {"max_tokens": 160, "requests": 1, "warmup": 0},
        "verdict": {"symptom": "length", "verify_samples": 0},
    }
    for section, values in over.items():
        data[section] = {**data.get(section, {}), **values}
    return parse_spec(data)


def source_spec(h: History, index_url: str) -> BisectSpec:
    """A venv per commit, its requirements resolved on ``index_url``."""
    return parse_spec({
        "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
        "build": {"kind": "source", "install_args": ["--index-url", index_url]},
        "serve": {"model": "sim-model", "env": {"VLLM_BISECT_SIM_PATH": sim_path()},
                  "speculative": {"method": "mtp", "num_speculative_tokens": 3}},
        "probe": {"max_tokens": 160, "requests": 1, "warmup": 0},
        "verdict": {"symptom": "length", "verify_samples": 0},
    })


def bisect(spec: BisectSpec, tmp: Path) -> Path:
    from vllm_bisect.bisect.driver import NullEvents
    from vllm_bisect.run_bisect import run_bisect

    session = tmp / "session"
    run_bisect(spec, session, tmp / "cache", NullEvents())
    return session
