"""Durations from a monotonic clock (issue 49, item 6): the wall clock jumping 5 years
forward in the middle of a ``vllm-bisect run`` subprocess (an LD_PRELOAD shim that shifts
CLOCK_REALTIME only, as an NTP step or ``date -s`` does; compiled here, skipped without a C
compiler) does not become 5 years of work in result.json or the report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import sim_serve, spec_for
from tests.helpers import history, write_spec

FIVE_YEARS_S = 5 * 365 * 24 * 3600


def shim(tmp: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the clock-jump shim")
    out = tmp / "clockjump.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out),
                    str(Path(__file__).with_name("clockjump.c")), "-ldl"], check=True)
    return out


def test_a_wall_clock_jump_mid_run_is_not_counted(tmp_path: Path) -> None:
    lib = shim(tmp_path)
    jump = tmp_path / "jump"
    jump.write_text("0\n")
    ahead = tmp_path / "ahead"
    ahead.write_text(f"{FIVE_YEARS_S}\n")
    h = history(tmp_path, n_commits=3, cap_at=2)
    # the first server start moves the run's wall clock 5 years forward
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve(f"cp {ahead} {jump}; ")))
    env = {**os.environ, "LD_PRELOAD": str(lib), "CLOCKJUMP_FILE": str(jump)}
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                        "--session", str(tmp_path / "s"), "--cache-dir",
                        str(tmp_path / "cache"), "--json"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert jump.read_text().strip() == str(FIVE_YEARS_S)  # (the clock did jump)
    result = json.loads((tmp_path / "s" / "result.json").read_text())
    assert 0 < result["wall_s"] < 3600, result["wall_s"]
    assert str(FIVE_YEARS_S)[:5] not in (tmp_path / "s" / "report.md").read_text()
