"""The run says why the bad endpoint runs again before it does (issue 26: the demo printed
"bad endpoint ... (~6 steps left)" eight times before saying why)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.bisect.test_auto_driver import seeded_serve
from tests.helpers import history, make_spec, write_spec


def test_the_note_comes_before_the_bad_endpoints_second_run(tmp_path: Path) -> None:
    # every commit's first server misses the flaky cap (seed 2), its second shows it (seed 1)
    h = history(tmp_path, n_commits=4, cap_at=3, cap_probability=0.5)
    spec = write_spec(tmp_path / "s.toml", make_spec(
        h, build={"kind": "command", "serve": seeded_serve(tmp_path)},
        verdict={"symptom": "length", "verify_samples": 0, "confidence": 0.9,
                 "intermittent_runs": 4}))
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                        "--session", str(tmp_path / "sess"), "--cache-dir",
                        str(tmp_path / "cache")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    bad = [i for i, ln in enumerate(lines) if f"bad endpoint {h.bad[:12]}" in ln]
    note = [i for i, ln in enumerate(lines) if "intermittence check:" in ln]
    assert len(bad) >= 2 and note, r.stderr
    assert bad[0] < note[0] < bad[1], "\n".join(lines[:bad[1] + 1])
    said = " ".join(" ".join(lines[note[0]:bad[1]]).split())
    assert "judged good in its first run" in said and "up to 3 more times" in said


def test_the_demo_says_why_the_culprits_parent_runs_again(tmp_path: Path) -> None:
    import json

    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "demo", "--json",
                        "--workdir", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    lines = r.stderr.splitlines()
    parent = [i for i, ln in enumerate(lines)
              if f"bisect {doc['verification']['parent'][:12]}" in ln]
    note = [i for i, ln in enumerate(lines) if "re-check 1 of" in ln]
    assert len(parent) >= 2 and note, r.stderr
    assert parent[0] < note[0] < parent[1], "\n".join(lines)
    assert f"the culprit's parent {doc['verification']['parent'][:12]} again" in lines[note[0]]
