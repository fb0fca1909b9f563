"""A server that serves another model than the spec's is a skip naming both, never judged
(issue 49, item 1). Through the real entry points: ``vllm-bisect probe`` against a real
local server, ``git bisect run vllm-bisect hook`` and ``vllm-bisect run`` over a real
history whose serve script, at some commits, starts another model behind a router that
answers any name (the simulator's ``VLLM_SIM_ANY_MODEL=1``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import git as gitpy

from tests.bisect.test_hook_parity import HOOK, git
from tests.builders.test_command import sim_env
from tests.config_specs import config_spec
from tests.helpers import write_spec
from tests.probes.hostile_sse import HostileServer
from vllm_bisect.sim.config_history import BASE_ARGS, SERVE, ConfigHistory

CLI = [sys.executable, "-m", "vllm_bisect.cli"]
# a commit's serve script that starts another model ("other", its own generation config)
# behind a router that answers a request for any name, streaming its own
OTHER = """\
#!/bin/sh
set -e
PORT="$1"
mkdir -p "$PWD/other"
for f in "$BASE_MODEL"/*; do ln -sf "$f" "$PWD/other/"; done
echo '{gen}' > "$PWD/other/generation_config.json"
VLLM_SIM_ANY_MODEL=1 exec ${{VLLM:-vllm}} serve "$PWD/other" --port "$PORT" \
  --max-model-len 2048 --served-model-name other
"""


def served_history(path: Path, n_commits: int, cap_at: int,
                   other: dict[int, int | None]) -> ConfigHistory:
    """A serve-configuration history: from ``cap_at`` on the spec's model ("tiny") stops at
    128 tokens (its generation config); at the commits of ``other`` the serve script starts
    another model (capped at the value's tokens, None: not capped)."""
    repo = gitpy.Repo.init(path, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "vLLM Ops")
        cw.set_value("user", "email", "ops@vllm.invalid")
    shas: list[str] = []
    for i in range(n_commits + 1):
        gen: dict[str, object] = {"eos_token_id": 1, "do_sample": False}
        if i >= cap_at:
            gen["max_new_tokens"] = 128
        if i in other:
            cap = other[i]
            ogen = {"eos_token_id": 1} | ({"max_new_tokens": cap} if cap else {})
            script = OTHER.format(gen=json.dumps(ogen))
        else:
            script = SERVE.format(rev=i, args=BASE_ARGS)
        (path / "serve.sh").write_text(script)
        (path / "generation_config.json").write_text(json.dumps(gen) + "\n")
        repo.index.add(["serve.sh", "generation_config.json"])
        subject = ("Ship max_new_tokens=128" if i == cap_at else
                   "Serve another model" if i in other else f"revision {i}")
        shas.append(repo.index.commit(f"{subject} (#{100 + i})").hexsha)
    planted = {"length": shas[cap_at]} if cap_at <= n_commits else {}
    return ConfigHistory(path=path, shas=tuple(shas), planted=planted)


def spec_file(h: ConfigHistory, tmp: Path) -> Path:
    env = {**sim_env(tmp), "VLLM_SIM_STEP_MS": "0.3"}
    spec = config_spec(h, "length", env, startup_timeout_s=30, requests=1).with_overrides(
        probe={"warmup": 0}, verdict={"verify_samples": 0})
    return write_spec(tmp / "spec.toml", spec)


def test_probe_skips_a_stream_of_another_model() -> None:
    with HostileServer("model-other") as url:
        r = subprocess.run([*CLI, "probe", "--url", url, "--model", "m", "--requests", "1",
                            "--warmup", "0", "--max-tokens", "8", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout
    flat = " ".join(r.stderr.split())
    assert "model 'other', not 'm'" in flat, r.stderr
    assert "Traceback" not in r.stderr and "output_tokens" not in r.stdout


def test_probe_skips_a_server_listing_another_model() -> None:
    with HostileServer("valid") as url:  # it lists m, sim-model and tiny
        r = subprocess.run([*CLI, "probe", "--url", url, "--model", "other", "--requests", "1",
                            "--warmup", "0", "--max-tokens", "8", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout
    flat = " ".join(r.stderr.split())
    assert "serves 'm', 'sim-model', 'tiny', not 'other'" in flat, r.stderr


def test_git_bisect_run_skips_commits_serving_another_capped_model(tmp_path: Path) -> None:
    # commits 1-4 serve another model capped at 64 tokens; the spec's model is capped from 6
    h = served_history(tmp_path / "configs", 8, cap_at=6, other=dict.fromkeys(range(1, 5), 64))
    spec = spec_file(h, tmp_path)
    git(h.path, "bisect", "start", h.bad, h.good)
    try:
        r = subprocess.run(["git", "bisect", "run", *HOOK, "--spec", str(spec), "--cache-dir",
                            str(tmp_path / "cache")], cwd=h.path, capture_output=True,
                           text=True, timeout=600)
        log = git(h.path, "bisect", "log")
    finally:
        git(h.path, "bisect", "reset")
    out = r.stdout + r.stderr
    m = re.search(r"([0-9a-f]{40}) is the first bad commit", r.stdout)
    assert m and m.group(1) == h.planted["length"], out[-4000:]
    for sha in h.shas[1:5]:  # none of them judged
        assert f"# bad: [{sha}]" not in log and f"# good: [{sha}]" not in log, log
    assert "serves 'other', not 'tiny'" in " ".join(r.stderr.split()), r.stderr[-3000:]


def test_run_skips_a_commit_serving_another_model_at_full_length(tmp_path: Path) -> None:
    # the spec's model is capped from 3 on; commit 4 serves another model, not capped: judged
    # good, it would move the culprit past the step
    h = served_history(tmp_path / "configs", 8, cap_at=3, other={4: None})
    spec = spec_file(h, tmp_path)
    r = subprocess.run([*CLI, "run", "--spec", str(spec), "--session", str(tmp_path / "s"),
                        "--cache-dir", str(tmp_path / "cache"), "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    result = json.loads(r.stdout)
    assert result["first_bad"] == h.planted["length"], r.stderr[-4000:]
    stored = json.loads((tmp_path / "s" / "result.json").read_text())
    text = json.dumps(stored)
    if h.shas[4] in text:  # measured by the search: a skip naming both models
        assert "serves 'other', not 'tiny'" in text


def test_hook_skips_another_model_behind_the_spec_served_name(tmp_path: Path) -> None:
    # the spec names the model and its served name; the commit's script serves another
    # model under that name: /v1/models' root names it
    h = served_history(tmp_path / "configs", 2, cap_at=9, other={})
    env = sim_env(tmp_path)
    base = env["BASE_MODEL"]
    spec = config_spec(h, "length", env, startup_timeout_s=30, requests=1).with_overrides(
        probe={"warmup": 0}, serve={"model": base, "args": ["--served-model-name", "tiny"]})
    path = write_spec(tmp_path / "spec.toml", spec)
    git(h.path, "checkout", "-q", h.bad)  # serves $PWD/model (a copy) as "tiny"
    r = subprocess.run([*HOOK, "--spec", str(path), "--cache-dir", str(tmp_path / "cache")],
                       cwd=h.path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 125, r.stderr[-3000:]
    flat = " ".join(r.stderr.split())
    assert f"under the name 'tiny', not '{base}'" in flat, r.stderr[-3000:]
