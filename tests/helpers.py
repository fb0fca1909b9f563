"""Helpers shared by tests that bisect real generated histories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_bisect.sim.history import History, HistoryPlan, generate_history, sim_path
from vllm_bisect.spec import BisectSpec, dump_spec, parse_spec


def make_spec(history: History, **over: dict[str, Any]) -> BisectSpec:
    data: dict[str, Any] = {
        "range": {"repo": str(history.path), "good": history.good, "bad": history.bad},
        "build": {"kind": "source"},
        "ops": {"startup_timeout_s": 30},
        "serve": {"model": "sim-model",
                  "env": {"VLLM_BISECT_SIM_PATH": sim_path()},
                  "speculative": {"method": "mtp", "num_speculative_tokens": 3}},
        "probe": {"max_tokens": 160, "requests": 1, "warmup": 0},
        # no repeated bad-endpoint runs (auto's check for a cap that shows in some runs
        # only): the tests that are not about it keep their server starts
        "verdict": {"symptom": "length", "intermittent_runs": 1},
    }
    for section, values in over.items():
        data[section] = {**data.get(section, {}), **values}
    return parse_spec(data)


def history(tmp: Path, **plan: Any) -> History:
    base: dict[str, Any] = {"step_ms": 1.0, "init_s": 0.0}
    base.update(plan)
    return generate_history(tmp / "vllm", HistoryPlan(**base))


def write_spec(path: Path, spec: BisectSpec) -> Path:
    path.write_text(dump_spec(spec))
    return path


def abbrev(sha: str, n: int = 9) -> str:
    """The shortest prefix of ``sha``, at least ``n`` long, with a letter in it. A synthetic
    history's shas change with the simulator's text; an all-digit prefix (about 1.5% at 9)
    reads as a number, not a commit, in a report, so a test that wrote ``sha[:9]`` failed
    for some template texts and not others."""
    k = n
    while k < len(sha) and sha[:k].isdigit():
        k += 1
    return sha[:k]
