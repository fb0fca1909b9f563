"""docs/ci.md, the CI recipe (issue 50 item 10): its workflows are valid YAML, every
`vllm-bisect` command line in them uses options the CLI has, and its exit-code table is the
CLI's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from vllm_bisect.cli.app import EXIT_ABORT, EXIT_INTERRUPTED, EXIT_NOT_REPRODUCED, EXIT_USER

DOC = (Path(__file__).parents[1] / "docs" / "ci.md").read_text()


def blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC, re.S)


def commands() -> list[tuple[str, list[str]]]:
    """Each `vllm-bisect CMD ...` line of the workflows (continuations joined): the command
    and its options."""
    text = "\n".join(blocks()).replace("\\\n", " ")
    out = []
    for m in re.finditer(r"vllm-bisect (\w+)([^\n|>]*)", text):
        out.append((m.group(1), re.findall(r"(?<!\S)(--[a-z-]+)", m.group(2))))
    return out


def test_the_workflows_are_valid_yaml() -> None:
    gh, bk = (yaml.safe_load(b) for b in blocks())
    assert set(gh["jobs"]) == {"watch", "bisect"}
    assert bk["steps"][0]["label"].endswith("nightly watch")
    uploaded = "\n".join(s["with"]["path"] for job in gh["jobs"].values()
                         for s in job["steps"] if "upload-artifact" in str(s.get("uses")))
    for name in ("report.md", "report.html", "watch.md", "watch.html"):
        assert name in uploaded and any(name in p for s in bk["steps"]
                                        for p in s["artifact_paths"]), name


def test_every_command_line_uses_options_the_cli_has() -> None:
    found = commands()
    assert {c for c, _ in found} >= {"watch", "hook", "run"}
    helps: dict[str, str] = {}
    for cmd, options in found:
        if cmd not in helps:
            r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", cmd, "--help"],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ, "COLUMNS": "200"})
            assert r.returncode == 0, r.stderr
            helps[cmd] = r.stdout
        for opt in options:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", helps[cmd]), (cmd, opt)


def test_the_exit_code_table_is_the_clis() -> None:
    for code in (EXIT_USER, EXIT_NOT_REPRODUCED, EXIT_INTERRUPTED, EXIT_ABORT):
        assert f"| `{code}` |" in DOC, code
    assert "| `0` / `1` / `125` |" in DOC
