"""The bot, run for real on 127.0.0.1, against a GitHub REST stand-in."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.bot.botkit import REPO, Bot, comment_event, final, wait_for, write_config
from tests.bot.github_standin import GitHubStandIn
from tests.helpers import abbrev, history


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
    cmd = comment_event(f"/bisect good={abbrev(h.good, 10)} bad={abbrev(h.bad, 10)} symptom=length")
    assert bot.send("issue_comment", cmd, delivery=d).json()["status"] == "queued"
    assert bot.send("issue_comment", cmd, delivery=d).json()["status"] == "duplicate delivery"
    ack = gh.comments[0]
    # as posted: the worker may already have edited it to "running" (seen with 8 test workers)
    assert "queued" in ack.posted and f"`{abbrev(h.good, 10)}`" in ack.posted
    wait_for(lambda: final(ack), context=bot.output)
    assert f"https://github.com/vllm-project/vllm/commit/{h.planted['length']}" in ack.body
    assert "https://github.com/vllm-project/vllm/pull/" in ack.body and "finished" in ack.body
    assert any("running over 10 commits" in e for e in ack.edits)  # progress, edited in place
    assert len(gh.comments) == 1 and set(gh.auth) == {"Bearer tok-123"}
    bot.proc.send_signal(signal.SIGTERM)
    bot.proc.wait(timeout=15)
    assert "tok-123" not in bot.output()


def test_a_job_claimed_before_its_queued_comment_is_stored_reports_there(
        tmp_path: Path, gh: GitHubStandIn, start_bot: Callable[[Path], Bot]) -> None:
    """The worker can claim a job before the webhook stored the id of its "queued" comment
    (GitHub slow to answer that POST: CI under load). Progress and the result still go into
    that comment, not into a second one while the first says "queued" for ever."""
    h = history(tmp_path, n_commits=4, cap_at=2)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state"))
    gh.delay_s = 2.0  # every GitHub call: the worker (polling every 0.5 s) claims the job first
    cmd = comment_event(f"/bisect good={abbrev(h.good, 10)} bad={abbrev(h.bad, 10)} symptom=length")
    assert bot.send("issue_comment", cmd).json()["status"] == "queued"
    ack = gh.comments[-1]
    assert "queued" in ack.posted
    wait_for(lambda: final(ack) or len(gh.comments) > 1, context=bot.output)
    assert [c.id for c in gh.comments] == [ack.id], [c.body[:80] for c in gh.comments]
    assert "finished" in ack.body and h.planted["length"] in ack.body
    assert any("running over 4 commits" in e for e in ack.edits)


def test_labeled_issue_is_triaged_and_survives_a_restart(tmp_path: Path, gh: GitHubStandIn,
                                                         start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=8, cap_at=5)
    report = (f"MTP decode regressed: works at `{abbrev(h.good)}` (good), but at `{abbrev(h.bad)}` "
              "every answer is capped at 128 tokens (bad).")
    payload = {"action": "labeled", "label": {"name": "bisect"},
               "issue": {"number": 7, "body": report}, "repository": {"full_name": REPO},
               "sender": {"login": "maintainer"}}
    gh.permissions["maintainer"] = "maintain"  # asked through the collaborators API
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "queue-only.toml", gh, h, state, workers=0))
    assert bot.send("issues", payload).json()["status"] == "awaiting confirmation"
    assert f"`{abbrev(h.bad)}`" in gh.comments[0].body and "`/bisect go`" in gh.comments[0].body
    go = comment_event("/bisect go", issue=7, issue_body=report)
    assert bot.send("issue_comment", go).json()["status"] == "queued"
    bot.proc.send_signal(signal.SIGTERM)
    bot.proc.wait(timeout=15)
    bot = start_bot(write_config(tmp_path / "work.toml", gh, h, state, workers=1))
    ack = gh.comments[1]
    wait_for(lambda: final(ack), context=bot.output)
    assert h.planted["length"] in ack.body and "finished" in ack.body


def test_not_reproduced_blames_nobody(tmp_path: Path, gh: GitHubStandIn,
                                      start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=4)  # nothing planted
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state"))
    bot.send("issue_comment", comment_event(f"/bisect good={h.good} bad={h.bad} symptom=length"))
    ack = gh.comments[0]
    wait_for(lambda: final(ack), context=bot.output)
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
    assert "| model | `/path/to/Qwen3.6-27B-NVFP4` | guessed | 6 |" in body
    # the ends it could not find are for the reporter to fill, in the form's shape
    assert "### Last good (fix search: last broken)\n\n_No response_" in body
    assert "good: no ref named as good" in body and "f4517815" not in body
    report = (f"Regressed: fine at `{abbrev(h.good)}` (good), but `{abbrev(h.bad)}` caps every answer "
              "at 128 tokens (bad).")
    r = bot.send("issue_comment", comment_event("/bisect", issue=2, issue_body=report))
    assert r.json()["status"] == "awaiting confirmation"   # shown first, run on /bisect go
    ask = gh.comments[-1].body
    assert "regression report" in ask and f"`{abbrev(h.bad)}`" in ask and "| 1 |" in ask
    assert "Comment `/bisect go` to start this bisect" in ask
    r = bot.send("issue_comment", comment_event("/bisect go", issue=2, issue_body=report))
    assert r.json()["status"] == "queued"
    ack = gh.comments[-1].body
    assert "regression report" in ack and f"`{abbrev(h.bad)}`" in ack and "| 1 |" in ack
