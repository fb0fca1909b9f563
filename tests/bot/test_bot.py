"""The bot, run for real on 127.0.0.1, against a GitHub REST stand-in."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.bot.github_standin import Comment, GitHubStandIn
from tests.helpers import history, make_spec
from vllm_bisect.runtime.process import free_port
from vllm_bisect.sim.history import History
from vllm_bisect.spec import _toml_value

SECRET = "s3cret-for-tests"
REPO = "vllm-project/vllm"


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def comment_event(body: str, association: str = "MEMBER", login: str = "maintainer",
                  issue: int = 1, issue_body: str = "") -> dict[str, Any]:
    return {"action": "created",
            "issue": {"number": issue, "body": issue_body,
                      "html_url": f"https://github.com/{REPO}/issues/{issue}"},
            "comment": {"id": 99, "body": body, "user": {"login": login},
                        "author_association": association},
            "repository": {"full_name": REPO}, "sender": {"login": login}}


class Bot:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], config: Path) -> None:
        self.url, self.proc, self.config = url, proc, config

    def send(self, event: str, payload: dict[str, Any], delivery: str | None = None,
             signature: str | None = None) -> httpx.Response:
        body = json.dumps(payload).encode()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                   "X-Hub-Signature-256": signature if signature is not None else sign(body),
                   "Content-Type": "application/json"}
        return httpx.post(self.url + "/webhook", content=body, headers=headers, timeout=30)


def write_config(path: Path, gh: GitHubStandIn, h: History, state: Path, **over: Any) -> Path:
    spec = make_spec(h).model_dump(mode="json", exclude_none=True)
    spec["range"] = {"repo": str(h.path)}
    cfg: dict[str, Any] = {"host": "127.0.0.1", "port": free_port(), "github_api_url": gh.url,
                           "state_dir": str(state), "cache_dir": str(state / "cache"),
                           "progress_interval_s": 0.0, "workers": 1}
    cfg.update(over)
    lines = [f"{k} = {_toml_value(v)}" for k, v in cfg.items()]
    for section, values in spec.items():
        lines.append(f"[base_spec.{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def env() -> dict[str, str]:
    return {**os.environ, "VLLM_BISECT_WEBHOOK_SECRET": SECRET, "GITHUB_TOKEN": "tok-123"}


@pytest.fixture
def start_bot(env: dict[str, str]) -> Iterator[Callable[[Path], Bot]]:
    bots: list[Bot] = []

    def start(config: Path) -> Bot:
        port = int(next(ln for ln in config.read_text().splitlines()
                        if ln.startswith("port")).split("=")[1])
        proc = subprocess.Popen([sys.executable, "-m", "vllm_bisect.cli", "bot", "serve",
                                 "--config", str(config)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError(proc.stdout.read().decode() if proc.stdout else "bot did not start")
        bot = Bot(url, proc, config)
        bots.append(bot)
        return bot

    yield start
    for b in bots:
        if b.proc.poll() is None:
            b.proc.send_signal(signal.SIGTERM)
            b.proc.wait(timeout=15)


@pytest.fixture
def gh() -> Iterator[GitHubStandIn]:
    g = GitHubStandIn()
    yield g
    g.close()


def wait_for(pred: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def final(c: Comment) -> bool:
    return "finished" in c.body or "inconclusive" in c.body or "failed" in c.body


def test_signatures_bodies_and_ping(tmp_path: Path, gh: GitHubStandIn,
                                    start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=3)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state",
                                 max_body_bytes=4096))
    assert bot.send("ping", {"zen": "hi"}).json() == {"status": "pong"}
    assert bot.send("ping", {"zen": "hi"}, signature="sha256=" + "0" * 64).status_code == 401
    assert bot.send("ping", {"zen": "hi"}, signature="").status_code == 401
    assert bot.send("ping", {"zen": "x" * 5000}).status_code == 413
    d = str(uuid.uuid4())
    assert bot.send("ping", {}, delivery=d).json() == {"status": "pong"}
    assert bot.send("ping", {}, delivery=d).json() == {"status": "duplicate delivery"}
    assert gh.comments == []


def test_unauthorized_and_invalid_requests(tmp_path: Path, gh: GitHubStandIn,
                                           start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=3)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state",
                                 jobs_per_user_per_hour=1, workers=0))
    r = bot.send("issue_comment", comment_event(f"/bisect good={h.good} bad={h.bad}",
                                                association="CONTRIBUTOR", login="drive-by"))
    assert r.json()["status"] == "unauthorized"
    assert "only maintainers and collaborators" in gh.comments[-1].body
    r = bot.send("issue_comment", comment_event("/bisect good=$(reboot) bad=x"))
    assert r.status_code == 422 and "is not a commit" in gh.comments[-1].body
    r = bot.send("issue_comment", comment_event(f"/bisect good={h.good} bad={h.bad}"))
    assert r.json()["status"] == "queued"
    r = bot.send("issue_comment", comment_event(f"/bisect good={h.shas[1]} bad={h.bad}"))
    assert r.status_code == 429 and "rate limit" in gh.comments[-1].body
    assert bot.send("issue_comment", comment_event("just a comment")).json()["status"] == "ignored"


def test_bisect_request_end_to_end(tmp_path: Path, gh: GitHubStandIn,
                                   start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=10, cap_at=6)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state"))
    d = str(uuid.uuid4())
    cmd = comment_event(f"/bisect good={h.good[:10]} bad={h.bad[:10]} symptom=length")
    assert bot.send("issue_comment", cmd, delivery=d).json()["status"] == "queued"
    assert bot.send("issue_comment", cmd, delivery=d).json()["status"] == "duplicate delivery"
    ack = gh.comments[0]
    assert "queued" in ack.body and f"`{h.good[:10]}`" in ack.body
    wait_for(lambda: final(ack))
    assert f"https://github.com/vllm-project/vllm/commit/{h.planted['length']}" in ack.body
    assert "https://github.com/vllm-project/vllm/pull/" in ack.body and "finished" in ack.body
    assert any("running over 10 commits" in e for e in ack.edits)  # progress, edited in place
    assert len(gh.comments) == 1 and set(gh.auth) == {"Bearer tok-123"}
    out = bot.proc
    out.send_signal(signal.SIGTERM)
    logs = out.communicate(timeout=15)[0].decode()
    assert "tok-123" not in logs


def test_labeled_issue_is_triaged_and_survives_a_restart(tmp_path: Path, gh: GitHubStandIn,
                                                         start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=8, cap_at=5)
    report = (f"MTP decode regressed: works at `{h.good[:9]}` (good), but at `{h.bad[:9]}` "
              "every answer is capped at 128 tokens (bad).")
    payload = {"action": "labeled", "label": {"name": "bisect"},
               "issue": {"number": 7, "body": report}, "repository": {"full_name": REPO},
               "sender": {"login": "maintainer"}, "sender_association": "OWNER"}
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "queue-only.toml", gh, h, state, workers=0))
    assert bot.send("issues", payload).json()["status"] == "queued"
    bot.proc.send_signal(signal.SIGTERM)
    bot.proc.wait(timeout=15)
    start_bot(write_config(tmp_path / "work.toml", gh, h, state, workers=1))
    ack = gh.comments[0]
    wait_for(lambda: final(ack))
    assert h.planted["length"] in ack.body and "finished" in ack.body


def test_not_reproduced_blames_nobody(tmp_path: Path, gh: GitHubStandIn,
                                      start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=4)  # nothing planted
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state"))
    bot.send("issue_comment", comment_event(f"/bisect good={h.good} bad={h.bad} symptom=length"))
    ack = gh.comments[0]
    wait_for(lambda: final(ack))
    assert "inconclusive" in ack.body and "No commit is blamed" in ack.body
    assert "First bad commit" not in ack.body


def test_bare_bisect_answers_with_what_it_read(tmp_path: Path, gh: GitHubStandIn,
                                               start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=3)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state", workers=0))
    sweep = (Path(__file__).parent.parent / "triage" / "corpus" / "founding-mtp-sweep-en"
             / "report.md").read_text()
    r = bot.send("issue_comment", comment_event("/bisect", issue_body=sweep))
    assert r.status_code == 422
    body = gh.comments[-1].body
    assert "could not determine good and bad" in body and "what I read from this issue" in body
    assert "| model | `/path/to/Qwen3.6-27B-NVFP4` | 6 |" in body
    assert "good: no ref named as good" in body and "f4517815" not in body
    report = (f"Regressed: fine at `{h.good[:9]}` (good), but `{h.bad[:9]}` caps every answer "
              "at 128 tokens (bad).")
    r = bot.send("issue_comment", comment_event("/bisect", issue=2, issue_body=report))
    assert r.json()["status"] == "queued"
    ack = gh.comments[-1].body
    assert "regression report" in ack and f"`{h.bad[:9]}`" in ack and "| 1 |" in ack
