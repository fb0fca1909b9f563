"""Frictions a new user met (issue 26), each through the real CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cli(*args: str, cwd: Path | None = None, timeout: int = 300
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def test_version_flag_works_like_the_command() -> None:
    flag, command = cli("--version"), cli("version")
    assert flag.returncode == 0 == command.returncode, flag.stderr
    assert flag.stdout == command.stdout and flag.stdout.strip()


def test_spec_keys_lists_every_key_and_typos_get_a_suggestion(tmp_path: Path) -> None:
    r = cli("spec", "--keys")
    assert r.returncode == 0, r.stderr
    for key in ("range.good", "serve.args", "probe.max_tokens", "verdict.symptom",
                "ops.startup_timeout_s", "build.tags", "build.kind", "parallel.workers"):
        assert f"{key}:" in r.stdout, key
    assert "build.kind: build.kind" not in r.stdout
    assert "(build.kind: image)" in r.stdout              # which kinds have build.tags
    spec = tmp_path / "s.toml"
    spec.write_text('[range]\ngood = "a"\nbad = "b"\n[serve]\narg = ["--x"]\n'
                    '[probe]\nmax_token = 5\n')
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "sess"))
    assert r.returncode == 2
    assert "serve.arg: unknown key (did you mean serve.args?)" in r.stderr, r.stderr
    assert "probe.max_token: unknown key (did you mean probe.max_tokens?)" in r.stderr
    assert "`vllm-bisect spec --keys` lists every key" in r.stderr
    assert "README list every key" not in r.stderr


def test_brackets_in_messages_survive(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[range]\ngood = "a"\nbad = "b"\n[serve]\nstartup_timeout_s = 5\n')
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "sess"))
    assert r.returncode == 2
    assert "(operational knobs are in [ops], outside the measurement key)" in r.stderr, r.stderr


def test_sim_history_makes_a_history_that_bisects(tmp_path: Path) -> None:
    r = cli("sim", "history", str(tmp_path / "h"), "--commits", "8", "--cap-at", "5")
    assert r.returncode == 0, r.stderr
    planted = r.stdout.split("planted length at ", 1)[1].split()[0]
    spec = tmp_path / "h-spec.toml"
    assert f"next: vllm-bisect run --spec {spec}" in r.stdout
    run = cli("run", "--spec", str(spec), "--session", str(tmp_path / "sess"), "--cache-dir",
              str(tmp_path / "cache"), "--json")
    assert run.returncode == 0, run.stderr
    assert f'"first_bad": "{planted}"' in run.stdout
    again = cli("sim", "history", str(tmp_path / "h"))
    assert again.returncode == 2 and "not empty" in again.stderr


def test_a_run_that_fails_before_its_session_prints_no_resume(tmp_path: Path) -> None:
    from tests.helpers import history, make_spec, write_spec

    h = history(tmp_path, n_commits=3)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "sess"), "--good", "0000000")
    assert r.returncode == 2 and "unknown good ref" in r.stderr
    assert "resume" not in r.stderr and not (tmp_path / "sess" / "journal.sqlite").exists()


def test_isolate_uses_the_sessions_cache_dir(tmp_path: Path) -> None:
    import os

    from tests.helpers import history, make_spec, write_spec

    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    session, mine = tmp_path / "session", tmp_path / "mine"
    r = cli("run", "--spec", str(spec), "--session", str(session), "--cache-dir", str(mine))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "session " in r.stderr and "(resume: " in r.stderr   # once the session exists
    default = Path(os.environ["VLLM_BISECT_CACHE_DIR"])
    r = cli("isolate", str(session), "--no-hunks", "--no-deps", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert not default.exists() or not any(default.iterdir()), list(default.iterdir())


def test_the_hooks_hint_names_what_it_uses(tmp_path: Path) -> None:
    from tests.helpers import history, make_spec, write_spec

    h = history(tmp_path, n_commits=3)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))   # range.repo is set: not used
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    r = cli("hook", "--spec", str(spec), cwd=outside)
    assert r.returncode == 128, r.stderr
    assert "range.repo (or --repo)" not in r.stderr and "--repo" not in r.stderr
    assert "inside your vLLM checkout" in " ".join(r.stderr.split())


def test_report_counts_what_result_json_holds(tmp_path: Path) -> None:
    """Two-level ITL bisect: the verification holds one request per end; the report says
    so, counts every server start (the verification's too) and offers no `deps` for a
    culprit whose pyproject changed only its version."""
    import json
    import re

    from tests.helpers import history, make_spec, write_spec

    h = history(tmp_path, n_commits=6, slow_at=3, slow_factor=3.0, noise_cv=0.05,
                server_cv=0.05)
    spec = write_spec(tmp_path / "s.toml", make_spec(
        h, verdict={"symptom": "itl", "strategy": "twolevel", "itl_factor": 1.5}))
    session = tmp_path / "sess"
    r = cli("run", "--spec", str(spec), "--session", str(session), "--cache-dir",
            str(tmp_path / "cache"), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    v = doc["verification"]
    n_c, n_p = len(v["culprit_per_request"]["itl_ms"]), len(v["parent_per_request"]["itl_ms"])
    md = (session / "report.md").read_text()
    said = (f"{n_c} request{'s' if n_c != 1 else ''} each" if n_c == n_p
            else f"{n_c} requests on the culprit, {n_p} on its parent")
    assert said in md, md
    assert f"{v['samples']} requests each" not in md or v["samples"] == n_c == n_p
    started = r.stderr.count("starting server")
    assert doc["server_starts"] == started   # the verification's included
    assert re.search(rf"\b{started} server starts \(endpoints \d+, .*verify 2\b", md), md
    assert sum(doc["starts_by_phase"].values()) == started
    assert f"{started} server starts" in " ".join(r.stdout.split())
    assert "vllm-bisect deps" not in md


def test_the_readme_installs_into_a_venv_first() -> None:
    """A system Python refuses `pip install` ("externally-managed-environment")."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Install", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.strip()]
    first_pip = next(i for i, ln in enumerate(lines) if "pip install" in ln)
    assert any("-m venv" in ln and "activate" in ln for ln in lines[:first_pip]), block
