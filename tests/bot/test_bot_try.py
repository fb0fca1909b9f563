"""`vllm-bisect bot try` (issue 42): the bot end to end offline, as the README tells a new
user to try it; and `bot serve` names its webhook path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_bot_try_runs_a_bisect_through_the_webhook_and_names_the_planted_commit(
        tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "bot", "try", "--workdir",
                        str(tmp_path / "try")], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    hook = re.search(r"webhook POST (http://127\.0\.0\.1:\d+)/webhook", out)
    assert hook, out
    assert "GitHub stand-in: http://127.0.0.1:" in out
    assert re.search(r"delivered issue_comment '/bisect good=[0-9a-f]{12} bad=[0-9a-f]{12}' "
                     r"from a MEMBER, signed X-Hub-Signature-256: HTTP 202", out), out
    assert "Bisect job #1 queued" in out and "Bisect job #1 finished." in out
    assert "## vllm-bisect result" in out and "**First bad commit:**" in out
    assert re.search(r"the bot named [0-9a-f]{12} \(the planted commit\)", out), out[-2000:]
    # `bot serve` said where its webhook is, first thing
    log = (tmp_path / "try" / "bot.log").read_text()
    assert f"webhook: POST {hook.group(1)}/webhook" in " ".join(log.split())
    assert "health: GET" in log
