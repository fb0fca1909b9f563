"""``vllm-bisect bot try``: the bot end to end, offline. A synthetic vLLM history (the
simulator serves each commit), a GitHub stand-in on 127.0.0.1 (``sim.github``: issues and
comments, as the REST API has them), a real ``vllm-bisect bot serve`` on its own port with a
throwaway webhook secret and token, and one signed ``issue_comment`` delivery to its webhook
(``POST /webhook``) asking ``/bisect good=<sha> bad=<sha>``: the bot acknowledges, runs the
bisect and edits its comment into the report, as it would on GitHub. No printing: the steps
go to ``on_step``, the comments to ``on_comment``."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from vllm_bisect import net
from vllm_bisect.bot.app import HEALTH_PATH, WEBHOOK_PATH
from vllm_bisect.errors import FatalError

REPO = "vllm-project/vllm"
ISSUE = 1
FINAL = re.compile(r"Bisect job #\d+ (finished|is inconclusive|failed)")
ISSUE_BODY = ("Decode output stops at exactly 128 tokens with MTP after upgrading; the older "
              "build gave the full length.")


@dataclass(frozen=True)
class BotTrial:
    workdir: Path
    config: Path
    log: Path
    webhook: str            # the URL the delivery was posted to
    command: str            # the comment that asked for the bisect
    planted: str            # the commit the history's cap was planted at
    comments: tuple[str, ...]   # the bot's comments, their final text
    first_bad: str | None   # what the bot's report named


def _spec(workdir: Path) -> tuple[dict[str, Any], str, str, str]:
    from vllm_bisect.sim.history import HistoryPlan, generate_history, sim_path

    h = generate_history(workdir / "vllm", HistoryPlan(n_commits=12, cap_at=8, step_ms=2.0,
                                                       init_s=0.0, seed=42))
    spec = {"range": {"repo": str(h.path)}, "build": {"kind": "source"},
            "serve": {"model": "sim-model", "env": {"VLLM_BISECT_SIM_PATH": sim_path()},
                      "speculative": {"method": "mtp", "num_speculative_tokens": 3}},
            "probe": {"max_tokens": 160, "requests": 1, "warmup": 0},
            "verdict": {"symptom": "length", "intermittent_runs": 1, "verify_samples": 2}}
    return spec, h.good, h.bad, h.planted["length"]


def _config(workdir: Path, github_url: str, port: int, spec: dict[str, Any]) -> Path:
    from vllm_bisect.spec.load import _toml_value

    cfg = {"host": "127.0.0.1", "port": port, "github_api_url": github_url,
           "state_dir": str(workdir / "bot-state"), "cache_dir": str(workdir / "cache"),
           "progress_interval_s": 0.0, "workers": 1}
    lines = ["# written by `vllm-bisect bot try`: the bot against a local GitHub stand-in"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in cfg.items()]
    for section, values in spec.items():
        lines.append(f"[base_spec.{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    path = workdir / "bot.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FatalError(f"the bot exited with code {proc.returncode} before it answered "
                             f"{HEALTH_PATH}", hint=f"see its log: {log}")
        try:
            if httpx.get(url + HEALTH_PATH, timeout=1.0,
                         verify=net.tls_context()).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise FatalError(f"the bot did not answer {url}{HEALTH_PATH} within {timeout_s:.0f} s",
                     hint=f"see its log: {log}")


def _delivery(secret: str, command: str) -> tuple[bytes, dict[str, str]]:
    payload = {"action": "created",
               "issue": {"number": ISSUE, "body": ISSUE_BODY,
                         "html_url": f"https://github.com/{REPO}/issues/{ISSUE}"},
               "comment": {"id": 1001, "body": command, "user": {"login": "maintainer"},
                           "author_association": "MEMBER"},
               "repository": {"full_name": REPO}, "sender": {"login": "maintainer"}}
    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return body, {"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": str(uuid.uuid4()),
                  "X-Hub-Signature-256": sig, "Content-Type": "application/json"}


def try_bot(workdir: Path, on_step: Callable[[str], None],
            on_comment: Callable[[int, str], None], timeout_s: float = 900.0) -> BotTrial:
    """Run the trial in ``workdir`` (a new or empty directory); see the module docstring."""
    from vllm_bisect.runtime.ports import free_port
    from vllm_bisect.sim.github import GitHubStandIn

    workdir.mkdir(parents=True, exist_ok=True)
    spec, good, bad, planted = _spec(workdir)
    on_step(f"synthetic vLLM history: {workdir / 'vllm'} (a 128-token cap planted at "
            f"{planted[:12]})")
    gh = GitHubStandIn({(REPO, ISSUE): ISSUE_BODY})
    on_step(f"GitHub stand-in: {gh.url} (a local server; issue {REPO}#{ISSUE})")
    secret = secrets.token_hex(16)
    env = {**os.environ, "VLLM_BISECT_WEBHOOK_SECRET": secret,
           "GITHUB_TOKEN": "bot-try-" + secrets.token_hex(8)}
    port = free_port()
    config = _config(workdir, gh.url, port, spec)
    log = workdir / "bot.log"
    url = f"http://127.0.0.1:{port}"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vllm_bisect.cli", "bot", "serve",
                                 "--config", str(config)], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_healthy(url, proc, log, 60.0)
        on_step(f"bot: `vllm-bisect bot serve --config {config}`, webhook POST "
                f"{url}{WEBHOOK_PATH}, log {log}")
        command = f"/bisect good={good[:12]} bad={bad[:12]}"
        body, headers = _delivery(secret, command)
        r = httpx.post(url + WEBHOOK_PATH, content=body, headers=headers, timeout=60)
        on_step(f"delivered issue_comment {command!r} from a MEMBER, signed "
                f"X-Hub-Signature-256: HTTP {r.status_code} {r.text.strip()[:120]}")
        if r.status_code >= 400:
            raise FatalError(f"the bot refused the delivery: HTTP {r.status_code} {r.text[:200]}",
                             hint=f"see its log: {log}")
        seen: dict[int, str] = {}
        deadline = time.monotonic() + timeout_s
        while True:
            for c in list(gh.comments):
                if seen.get(c.id) != c.body:
                    seen[c.id] = c.body
                    on_comment(c.id, c.body)
            if any(FINAL.search(b) for b in seen.values()):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise FatalError("the bot did not finish the bisect"
                                 + (f" (it exited with code {proc.returncode})"
                                    if proc.poll() is not None else f" in {timeout_s:.0f} s"),
                                 hint=f"see its log: {log}")
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        gh.close()
    final = next(b for b in seen.values() if FINAL.search(b))
    named = re.search(r"commit/([0-9a-f]{40})", final)
    return BotTrial(workdir, config, log, url + WEBHOOK_PATH, command, planted,
                    tuple(seen.values()), named.group(1) if named else None)
