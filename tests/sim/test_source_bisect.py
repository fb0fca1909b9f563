"""End to end on the simulator: `vllm-bisect run` and `git bisect run vllm-bisect hook` over a
source history of the fake vLLM tree, every commit built by the precompiled source path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_bisect.sim.fake_vllm_tree import build_fake_wheel, write_fake_vllm_tree
from vllm_bisect.sim.source_history import PlantKind, make_source_history, source_spec_data
from vllm_bisect.spec import dump_spec, parse_spec

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


@pytest.mark.parametrize("kind", [PlantKind.CAP, PlantKind.SPEC])
def test_run_and_hook_find_the_planted_commit(tmp_path: Path, kind: PlantKind) -> None:
    h = make_source_history(write_fake_vllm_tree(tmp_path / "src"), tmp_path / "hist", kind,
                            seed=5, n_commits=24)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}\n")
    data = source_spec_data(h, str(model), str(build_fake_wheel(tmp_path / "w")), 60.0)
    data["serve"]["env"].update({"VLLM_SIM_SPEC_STEP_MS": "2", "VLLM_SIM_ACCEPTANCE": "0.9"})  # type: ignore[index]
    spec = tmp_path / "spec.toml"
    spec.write_text(dump_spec(parse_spec(data)))
    cache, session = tmp_path / "cache", tmp_path / "session"
    run = subprocess.run([*CLI, "run", "--spec", str(spec), "--session", str(session),
                          "--cache-dir", str(cache), "--json"], cwd=h.path, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((session / "result.json").read_text())
    assert result["first_bad"] == h.planted, run.stderr[-3000:]
    git = ["git", "-C", str(h.path)]
    subprocess.run([*git, "bisect", "start", h.bad, h.good], check=True, capture_output=True)
    hook = subprocess.run([*git, "bisect", "run", *CLI, "hook", "--spec", str(spec),
                           "--cache-dir", str(cache)], capture_output=True, text=True,
                          timeout=900)
    assert f"{h.planted} is the first bad commit" in hook.stdout, hook.stdout[-3000:]


def test_a_compiled_change_at_the_bad_end_is_a_clear_error_with_the_builders_advice(
        tmp_path: Path) -> None:
    # real vLLM (docs/validation.md (m)): the bad end changed csrc/ since the wheel's commit,
    # so a precompiled build of it is a skip; the run must stop with that reason and the
    # builder's advice, not "pick a good commit" (it is the bad end)
    h = make_source_history(write_fake_vllm_tree(tmp_path / "src"), tmp_path / "hist",
                            PlantKind.CSRC, seed=5, n_commits=8)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}\n")
    data = source_spec_data(h, str(model), str(build_fake_wheel(tmp_path / "w")), 60.0)
    spec = tmp_path / "spec.toml"
    spec.write_text(dump_spec(parse_spec(data)))
    run = subprocess.run([*CLI, "run", "--spec", str(spec), "--session", str(tmp_path / "s"),
                          "--cache-dir", str(tmp_path / "cache")], cwd=h.path,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 3, run.stderr[-3000:]
    assert f"the bad endpoint {h.bad[:12]} could not be tested: compiled sources changed" \
        in run.stderr and "(csrc/ops.h) and full_build = false" in run.stderr
    assert "hint: set build.full_build = true to compile; or pick a bad commit that builds " \
        "and serves" in run.stderr
    assert "Traceback" not in run.stderr
    # before anything was built: the plan of the bad end is a git diff (on real vLLM the
    # good end's build and server came first, 7.6 min)
    assert not list((tmp_path / "s" / "logs").glob("build-*.log"))
    assert "starting server" not in run.stderr
