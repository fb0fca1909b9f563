"""Helpers for running the bot for real on 127.0.0.1 against a GitHub stand-in."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.bot.github_standin import Comment, GitHubStandIn
from tests.helpers import make_spec
from vllm_bisect.runtime.process import free_port
from vllm_bisect.sim.history import History
from vllm_bisect.spec.load import _toml_value

SECRET = "s3cret-for-tests"
REPO = "vllm-project/vllm"
_ids = itertools.count(1000)


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def comment_event(body: str, association: str = "MEMBER", login: str = "maintainer",
                  issue: int = 1, issue_body: str = "", author: str = "reporter",
                  action: str = "created") -> dict[str, Any]:
    """An issue_comment delivery; every call is a new comment (a new id), as on GitHub."""
    return {"action": action,
            "issue": {"number": issue, "body": issue_body, "user": {"login": author},
                      "html_url": f"https://github.com/{REPO}/issues/{issue}"},
            "comment": {"id": next(_ids), "body": body, "user": {"login": login},
                        "author_association": association},
            "repository": {"full_name": REPO}, "sender": {"login": login}}


class Bot:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], config: Path, log: Path) -> None:
        self.url, self.proc, self.config, self.log = url, proc, config, log

    def send(self, event: str, payload: dict[str, Any] | bytes, delivery: str | None = None,
             signature: str | None = None, no_delivery: bool = False) -> httpx.Response:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                   "X-Hub-Signature-256": signature if signature is not None else sign(body),
                   "Content-Type": "application/json"}
        if no_delivery:
            del headers["X-GitHub-Delivery"]
        return httpx.post(self.url + "/webhook", content=body, headers=headers, timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def write_config(path: Path, gh: GitHubStandIn, h: History, state: Path,
                 base_over: dict[str, dict[str, Any]] | None = None, **over: Any) -> Path:
    spec = make_spec(h).model_dump(mode="json", exclude_none=True)
    spec["range"] = {"repo": str(h.path)}
    for section, values in (base_over or {}).items():
        spec[section] = values
    cfg: dict[str, Any] = {"host": "127.0.0.1", "port": free_port(), "github_api_url": gh.url,
                           "state_dir": str(state), "cache_dir": str(state / "cache"),
                           "progress_interval_s": 0.0, "workers": 1,
                           "ack_wait_s": 60.0}  # answers carry the outcome (see test_webhook)
    cfg.update(over)
    lines = [f"{k} = {_toml_value(v)}" for k, v in cfg.items()]
    for section, values in spec.items():
        lines.append(f"[base_spec.{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def queued_specs(state: Path) -> list[dict[str, Any]]:
    """The spec of every job in the bot's queue (any status), oldest first."""
    import sqlite3

    with sqlite3.connect(state / "jobs.sqlite") as db:
        return [json.loads(r[0]) for r in db.execute("SELECT spec FROM jobs ORDER BY id")]


def wait_for(pred: Callable[[], bool], timeout: float = 120.0,
             context: Callable[[], str] | None = None) -> None:
    """Poll ``pred`` until true; a deadline for a hang, not a speed check. ``context`` (e.g. a
    bot's log) is put in the failure so a hang seen once under load can be read afterwards."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    tail = context()[-4000:] if context is not None else ""
    raise AssertionError("condition not met in time" + (f"; context:\n{tail}" if tail else ""))


def final(c: Comment) -> bool:
    return "finished" in c.body or "inconclusive" in c.body or "failed" in c.body
