"""The user's install line (``pip install -e .``) is enough for the user's commands; the
developer's (``.[dev]``) adds only the test and lint tools (issue 42: ``.[dev]`` was the only
install line, and `sim history --study deps` built its packages with setuptools, a dev-only
package)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.user_install import IMPORTS, dev_only_distributions, user_env

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


def test_every_dev_only_distribution_is_blocked_in_the_users_install(tmp_path: Path) -> None:
    dev = dev_only_distributions()
    assert set(dev) <= set(IMPORTS), f"map the dev extra's new packages: {set(dev) - set(IMPORTS)}"
    assert {"pytest", "ruff", "mypy", "setuptools"} <= set(dev)
    env = user_env(tmp_path)
    for mod in ("pytest", "setuptools", "ruff"):
        r = subprocess.run([sys.executable, "-c", f"import {mod}"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "dev-only module" in r.stderr, mod
    ok = subprocess.run([sys.executable, "-c", "import vllm_bisect.cli, scipy, jinja2"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr


def test_the_users_commands_run_without_the_dev_tools(tmp_path: Path) -> None:
    env = {**user_env(tmp_path), "VLLM_BISECT_CACHE_DIR": str(tmp_path / "cache")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=600,
                           cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr[-3000:])
        assert "dev-only module" not in r.stdout + r.stderr, args
        return r

    cli("sim", "history", str(tmp_path / "dep"), "--study", "deps")
    doc = json.loads(cli("run", "--spec", str(tmp_path / "dep-spec.toml"), "--session",
                         str(tmp_path / "s"), "--json").stdout)
    assert doc["first_bad"]
    deps = cli("deps", str(tmp_path / "s"))
    assert "conclusion: dependency" in " ".join(deps.stdout.split())
    assert "## vllm-bisect result" in cli("report", str(tmp_path / "s")).stdout
    cli("cache", "ls")
