"""The CLI: clear errors without tracebacks, --json shapes, the demo."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ServerFactory
from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.driver import NullEvents
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.models import Outcome
from vllm_bisect.run_bisect import run_bisect


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def test_probe_json(sim_server: ServerFactory) -> None:
    url = sim_server("--spec-k", "3", "--step-ms", "2", "--spec-output-cap", "128")
    r = cli("probe", "--url", url, "--model", "sim-model", "--max-tokens", "200",
            "--requests", "2", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("output_tokens", "requested_tokens", "length_ok", "itl_ms", "chunk_itl_ms",
                "tokens_per_chunk", "ttft_ms", "acceptance_length"):
        assert key in doc
    assert doc["output_tokens"] == [128, 128] and doc["length_ok"] is False
    assert doc["requested_tokens"] == 200


def test_probe_unreachable_is_clear(tmp_path: Path) -> None:
    r = cli("probe", "--url", "http://127.0.0.1:9", "--model", "m", "--warmup", "0")
    assert r.returncode == 1
    assert "error:" in r.stderr and "Traceback" not in r.stderr


def test_run_bad_refs_are_clear(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    for args, needle in ((["--good", "0000000"], "unknown good ref"),
                         (["--good", h.bad, "--bad", h.good], "not an ancestor"),
                         (["--bad", h.good], "same commit"),
                         (["--repo", str(tmp_path / "nope")], "does not exist")):
        r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "sess"), *args)
        assert r.returncode == 2, r.stderr
        assert needle in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr


def test_run_without_spec_is_clear(tmp_path: Path) -> None:
    r = cli("run", "--session", str(tmp_path / "new"))
    assert r.returncode == 2 and "no spec given" in r.stderr


def test_run_not_reproduced_exit_code(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "sess"))
    assert r.returncode == 3
    assert "did not reproduce" in r.stderr


class StopAfterTwo(NullEvents):
    """Interrupts a bisect (as Ctrl-C does) after its second judged commit."""

    def __init__(self) -> None:
        self.seen = 0

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        self.seen += 1
        if self.seen == 2:
            raise KeyboardInterrupt


def test_run_resumes_a_partial_then_a_finished_session(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=9, cap_at=5)
    spec = make_spec(h, ops={"retries": 1, "cache_max_size": "1G"})
    session, cache = tmp_path / "sess", tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        run_bisect(spec, session, cache, StopAfterTwo())
    assert not (session / "result.json").exists()
    # resumed from the spec the journal stored, without --spec
    r = cli("run", "--session", str(session), "--cache-dir", str(cache), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["first_bad"] == h.planted["length"] and doc["candidates"] == [doc["first_bad"]]
    assert {p["verdict"] for p in doc["probed"]} <= {"good", "bad", "skip"}
    assert r.stderr.count("(cached)") == 2  # the two judged before the stop are not re-probed
    assert json.loads((session / "result.json").read_text()) == doc  # one result model
    r2 = cli("run", "--session", str(session), "--cache-dir", str(cache))
    assert r2.returncode == 0 and "first bad commit" in r2.stdout
    assert "(cached)" in r2.stderr and "server starts" in r2.stdout
    assert f"session  {session}" in r2.stdout
    assert f"report   {session / 'report.md'}" in r2.stdout
    assert f"report   {session / 'report.html'}" in r2.stdout


def test_demo_json(tmp_path: Path) -> None:
    r = cli("demo", "--json", "--workdir", str(tmp_path / "demo"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["first_bad"] == doc["planted"] and doc["found_planted"] is True
    assert any(p["verdict"] == "skip" for p in doc["probed"])
    assert doc["n_commits"] >= 60
    session = Path(doc["session"])
    assert (session / "report.html").exists() and str(tmp_path / "demo") in r.stderr
    # the endpoints' environments (the good endpoint is lazy: the first commit judged good)
    env = doc["endpoint_env"]
    assert env["good_judged"] and env["compared"] and env["bad"] == doc["bad"]
    assert [c["name"] for c in env["packages"]] == ["vllm"] and not env["deps_command"]
    assert "differ in vLLM only" in env["line"]
    md = (session / "report.md").read_text()
    # (issue 42: the section named for the endpoints compares the endpoints only)
    assert "### Environments of the endpoints" not in md
    assert (f"### Environments of `{env['good'][:12]}` (judged good) and the bad endpoint" in md
            and f"the good endpoint `{doc['good'][:12]}` was not run" in md)


HEAVY = ("scipy", "numpy", "docker", "ray", "starlette", "uvicorn", "git", "jinja2",
         "vllm_bisect.bisect.driver", "vllm_bisect.verdict.sequential", "vllm_bisect.spec")


def _imported(*args: str) -> list[str]:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "vllm_bisect.cli", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return [line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines()
            if line.startswith("import time:") and "|" in line]


def test_version_and_hook_help_load_no_heavy_module_and_cli_once() -> None:
    for args in (["version"], ["hook", "--help"], ["run", "--help"]):
        mods = _imported(*args)
        assert mods.count("vllm_bisect.cli") == 1 and mods.count("vllm_bisect.cli.main") == 1
        loaded = [m for m in mods if any(m == h or m.startswith(h + ".") for h in HEAVY)]
        assert not loaded, (args, loaded)


def test_boolean_flags_look_like_flags() -> None:
    from typer.testing import CliRunner

    from vllm_bisect.cli.main import app

    runner = CliRunner()
    for command in (["run"], ["demo"], ["probe"], ["compare"], ["triage"], ["env"],
                    ["cache", "ls"], ["cache", "prune"], ["hook"], ["report"], ["bot", "serve"],
                    ["version"], ["cache"], ["isolate"], ["deps"], ["knobs"], ["sweep"], []):
        r = runner.invoke(app, [*command, "--help"], terminal_width=160)
        assert r.exit_code == 0 and "<bool>" not in r.output, (command, r.output)
        assert "--help " in r.output
    assert "--json " in runner.invoke(app, ["run", "--help"], terminal_width=160).output


def test_the_bisect_core_loads_scipy_only_when_a_test_runs() -> None:
    # every `git bisect run` step starts a hook process: scipy.stats alone cost ~1.5 s of CPU
    r = subprocess.run([sys.executable, "-X", "importtime", "-c",
                        "import vllm_bisect.bisect.hook, vllm_bisect.bisect.run_session, "
                        "vllm_bisect.compare"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = [line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines()
              if line.startswith("import time:") and "|" in line]
    assert loaded and not [m for m in loaded if m == "scipy" or m.startswith("scipy.")]


COMMANDS = [(), ("explain",), ("hook",), ("triage",), ("probe",), ("compare",), ("version",),
            ("env",), ("run",), ("report",), ("demo",), ("spec",), ("isolate",), ("deps",),
            ("knobs",), ("sweep",), ("watch",), ("bot",), ("bot", "serve"), ("bot", "try"),
            ("cache",), ("cache", "ls"), ("cache", "prune"), ("sim",), ("sim", "history")]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "top")
def test_help_wraps_at_the_terminal_not_inside_a_sentence(args: tuple[str, ...]) -> None:
    """issue 50: a docstring's own line breaks cut --help's sentences in the middle (a line
    of 90 characters on a 200-column terminal, the sentence going on below); every command's
    help, none with a "1 commits" or a "(s)" (tests/report/test_wording.py)."""
    import itertools
    import os

    from tests.report.test_wording import misread

    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args, "--help"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    lines = [ln.strip("│ ").rstrip() for ln in r.stdout.splitlines()]
    for before, after in itertools.pairwise(lines):
        # a line that goes on below (lower-case start, not a new entry) filled its width
        if before and after and after[0].islower() and not before.endswith((".", ":")):
            assert len(before) > 120, (before, after)
    assert not misread(r.stdout), misread(r.stdout)


def test_spec_keys_wrap_under_their_key() -> None:
    """A key's help wraps under the key (issue 50: its second line started at the margin)."""
    import os

    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "spec", "--keys"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines():
        assert line.startswith("    ") or re.match(r"[a-z_]+(\.[a-z_]+)+: ", line), line
        assert line == line.rstrip(), line
    assert any(line.startswith("    ") and len(line) > 90 for line in r.stdout.splitlines())
