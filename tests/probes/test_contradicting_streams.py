"""A stream whose token counts contradict each other is a probe error naming the two
numbers (the commit is skipped), never a short or a long output. Through the real entry
points: ``vllm-bisect probe`` against a real local server, and ``vllm-bisect hook`` whose
serve command starts it (exit 125, not a verdict)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import HOOK, git, spec_for
from tests.helpers import history, write_spec
from tests.probes.hostile_sse import HostileServer

CLI = [sys.executable, "-m", "vllm_bisect.cli"]
SCRIPT = Path(__file__).with_name("hostile_sse.py")
MAX_TOKENS = 160
# mode: the two numbers the error must name
CASES = {
    "usage-below-chunks": ("usage.completion_tokens 3", "10 chunks that carried text"),
    "usage-below-running": ("completion_tokens 5", "running count 12"),
    "usage-inflated": (f"completion_tokens {MAX_TOKENS}", "over 4 chunk(s)"),
    "usage-inflated-running": (f"completion_tokens {MAX_TOKENS}", "running count 4"),
    "choice-empty": ("no text, delta or finish_reason", "{}"),
}


def _probe(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "probe", "--url", url, "--model", "m", "--requests", "1",
                           "--warmup", "0", "--max-tokens", str(MAX_TOKENS), "--json"],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mode", sorted(CASES))
def test_probe_reports_the_contradiction(mode: str) -> None:
    with HostileServer(mode) as url:
        r = _probe(url)
    assert r.returncode != 0, r.stdout
    assert "output_tokens" not in r.stdout
    said = " ".join(r.stderr.split())
    for number in CASES[mode]:
        assert number in said, r.stderr
    assert "Traceback" not in r.stderr


def test_a_consistent_stream_is_measured() -> None:
    with HostileServer("valid") as url:
        r = _probe(url)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["output_tokens"] == [4]


def test_usage_zero_with_an_empty_text_choice_is_an_error() -> None:
    from vllm_bisect.errors import StreamFormatError
    from vllm_bisect.probes.counts import StreamCounts, check_counts

    c = StreamCounts()
    c.on_choice(None)
    with pytest.raises(StreamFormatError, match="is 0 after 1 choice"):
        check_counts("u", 0, c)
    check_counts("u", 1, c)   # one token with empty text: believable


@pytest.mark.parametrize("mode", sorted(CASES))
def test_a_length_hook_skips_a_contradicting_stream(tmp_path: Path, mode: str) -> None:
    h = history(tmp_path, n_commits=3)
    serve = f"exec {sys.executable} {SCRIPT} {{port}} {mode}"
    spec = spec_for(h, serve, ops={"retries": 0},
                    probe={"max_tokens": MAX_TOKENS, "min_tokens": 100})
    path = write_spec(tmp_path / "spec.toml", spec)
    git(h.path, "checkout", "-q", h.bad)
    r = subprocess.run([*HOOK, "--spec", str(path), "--cache-dir", str(tmp_path / "cache")],
                       cwd=h.path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 125, r.stderr[-3000:]
    assert CASES[mode][0] in " ".join(r.stderr.split()), r.stderr[-3000:]
