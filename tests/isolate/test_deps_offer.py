"""The report offers `vllm-bisect deps` only for a culprit that changes a pin (issue 26: the
demo's report offered it for a culprit that changed only the version in pyproject.toml),
through `vllm-bisect run` and the report.md it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from tests.isolate.helpers import command_spec
from vllm_bisect.sim.synth import dependency_history
from vllm_bisect.spec import BisectSpec

OFFER = "`vllm-bisect deps SESSION`"


def run(tmp: Path, spec: BisectSpec) -> str:
    path = write_spec(tmp / "s.toml", spec)
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(path),
                        "--session", str(tmp / "sess"), "--cache-dir", str(tmp / "cache")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return (tmp / "sess" / "report.md").read_text()


def test_a_culprit_that_bumps_a_pin_gets_the_deps_offer(tmp_path: Path) -> None:
    # the culprit bumps tinydep 1.0 -> 1.1 in requirements/common.txt and caps in its code;
    # tinydep itself is a module on the server's PYTHONPATH (harmless at both versions)
    h = dependency_history(tmp_path / "vllm", "tinydep", "1.0", "1.1", before=1, after=1,
                           code_cap=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "tinydep.py").write_text("SPEC_OUTPUT_CAP = None\n")
    base = command_spec(h)
    spec = command_spec(h, serve={"env": {**base.serve.env, "PYTHONPATH": str(site)}})
    md = run(tmp_path, spec)
    assert h.planted["length"] in md
    assert OFFER in md, md


def test_a_culprit_that_changes_only_the_version_string_gets_none(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2, cap_at=2)   # every commit bumps pyproject's version
    md = run(tmp_path, make_spec(h, verdict={"verify_samples": 0}))
    assert h.planted["length"] in md
    assert "vllm-bisect deps" not in md, md
