"""The studies' commands: clear errors, no tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_errors_name_what_to_do(tmp_path: Path) -> None:
    done = cli("isolate", str(tmp_path / "none"))
    assert done.returncode == 2 and "holds no bisect spec" in done.stderr
    assert "pass --spec FILE" in done.stderr and "Traceback" not in done.stderr
    spec = tmp_path / "s.toml"
    spec.write_text('[build]\nkind = "url"\nurl = "http://127.0.0.1:9"\n')
    done = cli("knobs", "--spec", str(spec), "--commit", "HEAD", "--knob", "VLLM_X=1")
    assert done.returncode == 2 and "invalid knob 'VLLM_X=1'" in done.stderr
    assert "Traceback" not in done.stderr
