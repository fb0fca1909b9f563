"""A skipped commit's report line carries the cause from its log and the log's path (issue
26: "the skip reason in the report is cut to the command line; link the log that has the
cause")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.report.cause import cause_line

CAUSE = "RuntimeError: CMake 3.31 or newer is required"


def test_report_names_the_cause_and_links_the_build_log(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6, cap_at=5, unbuildable=(2, 3))
    spec = write_spec(tmp_path / "s.toml", make_spec(h, verdict={"verify_samples": 0}))
    session = tmp_path / "sess"
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                        "--session", str(session), "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    md = (session / "report.md").read_text()
    skipped = md.split("Skipped (never judged):", 1)[1].split("\n\n", 1)[0]
    doc = json.loads((session / "result.json").read_text())
    skips = [p for p in doc["probed"] if p["verdict"] == "skip"]
    assert {p["commit"] for p in skips} <= set(h.unbuildable) and skips
    for p in skips:
        rel = f"logs/build-{p['commit'][:12]}.log"
        assert f"- `{p['commit'][:12]}`: build of" in skipped, skipped
        assert f"  - log: `{rel}`" in skipped, skipped
        assert CAUSE in (session / rel).read_text()   # the linked log holds the cause
        assert p["cause"] == CAUSE and Path(p["log"]) == session / rel
    assert skipped.count(f"  - cause: `{CAUSE}`") == len(skips), skipped
    html = (session / "report.html").read_text()
    assert f"cause: <code>{CAUSE}</code>" in html
    # the live progress line of each skip (stderr: the CLI's only printer) says the same
    for p in skips:
        line = next(ln for ln in r.stderr.splitlines() if f"-> {p['commit'][:12]} skip" in ln)
        after = r.stderr.split(line, 1)[1].splitlines()[1:3]
        assert after == [f"             cause: {CAUSE}",
                         f"             log: logs/build-{p['commit'][:12]}.log"], r.stderr


VLLM_TAIL = """\
(EngineCore pid=1) INFO 12-05 04:31:03 [gpu_model_runner.py:5306] Model loading took 16 GiB
(EngineCore pid=1) ERROR 12-05 04:31:03 [core.py:1000] EngineCore failed to start.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_the_cause_is_the_error_line_not_the_wrapper_pointing_at_it() -> None:
    assert cause_line(VLLM_TAIL) == "torch.OutOfMemoryError: CUDA out of memory. Tried to " \
                                    "allocate 2.00 GiB."
    assert cause_line("INFO starting\nINFO still starting\n") is None
    assert cause_line("error: " + "x" * 1000).endswith("...")
