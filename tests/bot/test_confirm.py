"""A range the bot only read from the issue waits for `/bisect go` (issue 31): the live bot
over HTTP, the GitHub stand-in, the queue's SQLite file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bot.botkit import REPO, Bot, comment_event, queued_specs, write_config
from tests.bot.github_standin import GitHubStandIn
from tests.helpers import abbrev, history

StartBot = Callable[[Path], Bot]


def report(good: str, bad: str) -> str:
    return (f"MTP decode regressed: works at `{good}` (good), but at `{bad}` every answer is "
            "capped at 128 tokens (bad).")


def labeled(body: str, **extra: Any) -> dict[str, Any]:
    return {"action": "labeled", "label": {"name": "bisect"},
            "issue": {"number": 7, "body": body}, "repository": {"full_name": REPO},
            "sender": {"login": "maintainer"}, **extra}


def test_a_read_range_is_shown_and_runs_only_on_go(tmp_path: Path, gh: GitHubStandIn,
                                                   start_bot: StartBot) -> None:
    h = history(tmp_path, n_commits=6)
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, state, workers=0,
                                 jobs_per_user_per_hour=10))
    gh.permissions["maintainer"] = "maintain"
    body = report(abbrev(h.good), abbrev(h.bad))
    # a label: what was read (with the lines it came from) and the next step; no job
    assert bot.send("issues", labeled(body)).json() == {"status": "awaiting confirmation"}
    [ask] = gh.comments
    assert ask.issue == 7 and ask.body.startswith("@maintainer: The good and bad refs were read")
    assert f"range: good `{abbrev(h.good)}`, bad `{abbrev(h.bad)}`" in ask.body   # describe(plan)
    assert "what I read from this issue" in ask.body and "| 1 |" in ask.body  # plan.read
    assert ask.body.endswith("Comment `/bisect go` to start this bisect, or "
                             "`/bisect good=<ref> bad=<ref>` to correct it.")
    assert queued_specs(state) == []
    # the same event again (a new delivery id, same body: the webhook's dedupe), then a
    # relabel by someone else with the same reading (reply-once on the reading): silent
    assert bot.send("issues", labeled(body)).json()["status"] == "duplicate delivery"
    gh.permissions["other"] = "admin"
    again = {**labeled(body), "sender": {"login": "other"}}
    assert bot.send("issues", again).json()["status"] == "awaiting confirmation"
    assert bot.send("issue_comment", comment_event("/bisect", issue=7, issue_body=body)
                    ).json()["status"] == "awaiting confirmation"
    assert len(gh.comments) == 1 and queued_specs(state) == []
    # the issue was edited and reads differently: shown again
    edited = report(abbrev(h.shas[1]), abbrev(h.bad))
    assert bot.send("issues", labeled(edited, edited=True)).json()["status"] == \
        "awaiting confirmation"
    assert len(gh.comments) == 2 and f"good `{abbrev(h.shas[1])}`" in gh.comments[-1].body
    # only one ref typed: the other was read, so it is shown too
    r = bot.send("issue_comment", comment_event(f"/bisect good={abbrev(h.good)}", issue=7,
                                                issue_body=edited))
    assert r.json()["status"] == "awaiting confirmation"
    assert "The bad ref was read" in gh.comments[-1].body and queued_specs(state) == []
    # an outsider's go: the outsider reply, nothing queued
    r = bot.send("issue_comment", comment_event("/bisect go", association="NONE",
                                                login="drive-by", issue=7, issue_body=edited))
    assert r.json()["status"] == "unauthorized" and queued_specs(state) == []
    assert "only maintainers and collaborators" in gh.comments[-1].body
    # go: triaged again (the issue as it is now) and queued as a bare /bisect was before
    r = bot.send("issue_comment", comment_event("/bisect go", issue=7, issue_body=edited))
    assert r.json()["status"] == "queued", r.text
    ack = gh.comments[-1].body
    assert ack.startswith(f"Bisect job #{r.json()['job']} queued") and "| 1 |" in ack
    assert [s["range"] for s in queued_specs(state)] == [
        {"repo": str(h.path), "good": abbrev(h.shas[1]), "bad": abbrev(h.bad)}]
    # go with arguments: they override what was read
    r = bot.send("issue_comment", comment_event(f"/bisect go good={abbrev(h.good, 10)} symptom=itl",
                                                issue=7, issue_body=edited))
    assert r.json()["status"] == "queued", r.text
    spec = queued_specs(state)[-1]
    assert spec["range"]["good"] == abbrev(h.good, 10) and spec["range"]["bad"] == abbrev(h.bad)
    assert spec["verdict"]["symptom"] == "itl"
    # both refs typed: queued at once, with nothing to confirm
    n = len(gh.comments)
    r = bot.send("issue_comment", comment_event(f"/bisect good={h.shas[2]} bad={h.bad}",
                                                issue=8, issue_body=edited))
    assert r.json()["status"] == "queued" and len(gh.comments) == n + 1
    assert queued_specs(state)[-1]["range"]["good"] == h.shas[2]
    # `go` counts only as the first word
    r = bot.send("issue_comment", comment_event("/bisect symptom=itl go", issue=7))
    assert r.status_code == 422 and "unknown /bisect argument 'go'" in gh.comments[-1].body


def test_the_switch_off_queues_a_read_range_at_once(tmp_path: Path, gh: GitHubStandIn,
                                                    start_bot: StartBot) -> None:
    h = history(tmp_path, n_commits=3)
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, state, workers=0,
                                 confirm_triaged_range=False))
    gh.permissions["maintainer"] = "maintain"
    r = bot.send("issues", labeled(report(abbrev(h.good), abbrev(h.bad))))
    assert r.json()["status"] == "queued", r.text
    [ack] = gh.comments
    assert "queued" in ack.body and "`/bisect go`" not in ack.body
    assert [s["range"]["good"] for s in queued_specs(state)] == [abbrev(h.good)]
