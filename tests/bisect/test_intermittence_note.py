"""The run says why the bad endpoint runs again before it does (issue 26: the demo printed
"bad endpoint ... (~6 steps left)" eight times before saying why)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[str]]:
    """One `vllm-bisect demo --json`: its result and its progress lines (stderr)."""
    work = tmp_path_factory.mktemp("demo") / "demo"
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "demo", "--json",
                        "--workdir", str(work)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout), r.stderr.splitlines()


def test_the_demo_says_why_the_culprits_parent_runs_again(
        demo: tuple[dict[str, Any], list[str]]) -> None:
    doc, lines = demo
    parent = [i for i, ln in enumerate(lines)
              if f"bisect {doc['verification']['parent'][:12]}" in ln]
    note = [i for i, ln in enumerate(lines) if "re-check 1 of" in ln]
    assert len(parent) >= 2 and note, "\n".join(lines)
    assert parent[0] < note[0] < parent[1], "\n".join(lines)
    assert f"the culprit's parent {doc['verification']['parent'][:12]} again" in lines[note[0]]


def test_the_demo_says_why_the_endpoints_show_again_and_claims_nothing_unmeasured(
        demo: tuple[dict[str, Any], list[str]]) -> None:
    # issue 26: the endpoints were shown twice, the second time "(cached)", with no word why;
    # the first strategy line said "deterministic at both endpoints" before any run
    doc, lines = demo
    text = " ".join(" ".join(lines).split())
    first = text.split(" good endpoint ", 1)[0]   # what is said before anything is measured
    assert "verdict strategy threshold: auto: the length symptom is expected to be " \
           "deterministic" in first, first
    assert "deterministic at both endpoints" not in text
    good = [i for i, ln in enumerate(lines) if f"good endpoint {doc['good'][:12]}" in ln]
    cached = [i for i, ln in enumerate(lines) if "-> " in ln and ln.endswith("(cached)")]
    note = [i for i, ln in enumerate(lines) if "search starts from the endpoints" in ln]
    assert len(good) == 2 and len(cached) == 2 and len(note) == 1, "\n".join(lines)
    assert good[0] < note[0] < good[1] < cached[0], "\n".join(lines)   # why, before the repeat
    said = " ".join(" ".join(lines[note[0]:good[1]]).split())
    assert "their results are reused (cached), not measured again" in said, said
    # what the runs showed is what the result keeps (and the summary prints without --json)
    assert "showed in the bad endpoint's first run" in doc["strategy_reason"], doc
