"""The bot's correction flow on a form-filed issue (issue 51 item 4), through its real HTTP
port and the GitHub stand-in: the ready-to-edit block pasted in a `/bisect go` comment, or at
the end of the issue, wins over the first form (the latest answers); pasted back unedited it
gives the very same job (lossless) and its guesses stay guesses; a 422 names the real cause,
once per issue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.bot.botkit import Bot, comment_event, queued_specs, write_config
from tests.bot.github_standin import GitHubStandIn
from tests.helpers import abbrev, history
from tests.triage.test_read_as_written import form

StartBot = Callable[[Path], Bot]


def block_of(reply: str) -> str:
    return reply.split("````markdown\n", 1)[1].split("\n````", 1)[0]


def test_a_corrected_block_wins_on_a_form_filed_issue(tmp_path: Path, gh: GitHubStandIn,
                                                      start_bot: StartBot) -> None:
    h = history(tmp_path, n_commits=6)
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, state, workers=0,
                                 jobs_per_user_per_hour=20))
    wrong = abbrev(h.shas[3])
    issue = form(last_good=abbrev(h.good), first_bad=wrong, model="facebook/opt-125m",
                 hardware="2x H100 80GB, TP=2",
                 details="ITL went from 10 ms to 40 ms; generations stop at 256 tokens.")
    r = bot.send("issue_comment", comment_event("/bisect", issue=5, issue_body=issue))
    assert r.json()["status"] == "awaiting confirmation", r.text
    ask = gh.comments[-1].body
    assert "paste it into a comment under a first line `/bisect go`" in ask
    block = block_of(ask)
    assert "TP=2" in block and "stop at 256 tokens" in block   # what you saw, the hardware
    # go on the issue as filed: the job the reporter's form makes
    r = bot.send("issue_comment", comment_event("/bisect go", issue=5, issue_body=issue))
    assert r.json()["status"] == "queued", r.text
    [first] = queued_specs(state)
    assert first["range"]["bad"] == wrong, first
    # the block pasted back unchanged in a go comment: the same job (nothing lost on the way)
    r = bot.send("issue_comment", comment_event("/bisect go\n\n" + block, issue=5,
                                                issue_body=issue))
    assert r.json()["status"] == "already queued", (r.text, queued_specs(state))
    # corrected in a comment: the latest answer wins, read as written
    fixed = block.replace(f"\n{wrong}\n", f"\n{abbrev(h.bad)}\n", 1)
    r = bot.send("issue_comment", comment_event("/bisect go\n\n" + fixed, issue=5,
                                                issue_body=issue))
    assert r.json()["status"] == "queued", r.text
    spec = queued_specs(state)[-1]
    assert spec["range"]["bad"] == abbrev(h.bad) and spec["range"]["good"] == abbrev(h.good)
    assert {k: v for k, v in spec.items() if k != "range"} == {
        k: v for k, v in first.items() if k != "range"}
    ack = gh.comments[-1].body
    assert f"| range.bad (bad) | `{abbrev(h.bad)}` | **read** |" in ack, ack
    assert "holds the form 2 times" in ack
    # corrected by editing the issue (the block at its end): the same
    edited = issue + "\n" + fixed.replace(f"\n{abbrev(h.good)}\n", f"\n{abbrev(h.shas[1])}\n", 1)
    r = bot.send("issue_comment", comment_event("/bisect go", issue=5, issue_body=edited))
    assert r.json()["status"] == "queued", r.text
    assert queued_specs(state)[-1]["range"]["good"] == abbrev(h.shas[1])


def test_a_guess_pasted_back_stays_a_guess(tmp_path: Path, gh: GitHubStandIn,
                                           start_bot: StartBot) -> None:
    h = history(tmp_path, n_commits=4)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state", workers=0,
                                 jobs_per_user_per_hour=20))
    text = (f"Decoding got slower: fine at `{abbrev(h.good)}` (good), ITL 3x higher at "
            f"`{abbrev(h.bad)}` (bad).\n")
    bot.send("issue_comment", comment_event("/bisect", issue=6, issue_body=text))
    block = block_of(gh.comments[-1].body)
    r = bot.send("issue_comment", comment_event("/bisect go\n\n" + block, issue=6,
                                                issue_body=text))
    assert r.json()["status"] == "queued", r.text
    ack = gh.comments[-1].body
    assert f"| range.bad (bad) | `{abbrev(h.bad)}` | guessed |" in ack, ack
    assert "pasted back unedited" in ack and "| **read** |" not in ack, ack


def test_a_pr_end_is_named_as_the_cause_once(tmp_path: Path, gh: GitHubStandIn,
                                             start_bot: StartBot) -> None:
    h = history(tmp_path, n_commits=3)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state", workers=0,
                                 jobs_per_user_per_hour=20))
    issue = form(first_bad="https://github.com/vllm-project/vllm/pull/12345",
                 model="facebook/opt-125m")
    before = len(gh.comments)
    for _ in range(3):
        r = bot.send("issue_comment", comment_event("/bisect go", issue=8, issue_body=issue))
        assert r.status_code == 422
        error = r.json()["error"]
        assert "bad is PR #12345" in error and "merge commit" in error, error
        assert "could not determine" not in error
    assert len(gh.comments) == before + 1   # the same error is said once


def test_the_block_copied_with_its_fence_is_still_the_form(tmp_path: Path, gh: GitHubStandIn,
                                                           start_bot: StartBot) -> None:
    """Reporters copy the reply's ````markdown fence too: the block inside is still read."""
    h = history(tmp_path, n_commits=4)
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, state, workers=0,
                                 jobs_per_user_per_hour=20))
    wrong = abbrev(h.shas[1])
    issue = form(last_good=abbrev(h.good), first_bad=wrong, model="facebook/opt-125m")
    bot.send("issue_comment", comment_event("/bisect", issue=4, issue_body=issue))
    ask = gh.comments[-1].body
    fenced = "````markdown\n" + block_of(ask) + "\n````"
    fixed = fenced.replace(f"\n{wrong}\n", f"\n{abbrev(h.bad)}\n", 1)
    r = bot.send("issue_comment", comment_event("/bisect go\n\n" + fixed, issue=4,
                                                issue_body=issue))
    assert r.json()["status"] == "queued", r.text
    assert queued_specs(state)[-1]["range"]["bad"] == abbrev(h.bad)


def test_a_block_in_its_own_comment_is_read_by_the_next_go(tmp_path: Path, gh: GitHubStandIn,
                                                            start_bot: StartBot) -> None:
    """The reporter (an outsider) posts the corrected block as a comment; a maintainer's later
    plain `/bisect go` reads it. A drive-by's form comment is ignored; an edit of the
    reporter's comment is its latest answer."""
    h = history(tmp_path, n_commits=6)
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, state, workers=0,
                                 jobs_per_user_per_hour=20))
    wrong = abbrev(h.shas[2])
    issue = form(last_good=abbrev(h.good), first_bad=wrong, model="facebook/opt-125m")
    bot.send("issue_comment", comment_event("/bisect", issue=3, issue_body=issue))
    block = block_of(gh.comments[-1].body)
    fixed = block.replace(f"\n{wrong}\n", f"\n{abbrev(h.bad)}\n", 1)
    other = block.replace(f"\n{wrong}\n", f"\n{abbrev(h.shas[4])}\n", 1)
    # a drive-by's form is not the issue's; the reporter's is
    r = bot.send("issue_comment", comment_event("Here is a better range:\n\n" + other,
                                                association="NONE", login="drive-by",
                                                issue=3, issue_body=issue))
    assert r.json()["status"] == "ignored"
    r = bot.send("issue_comment", comment_event("Corrected:\n\n" + fixed, association="NONE",
                                                login="reporter", issue=3, issue_body=issue))
    assert r.json()["status"] == "form noted"
    r = bot.send("issue_comment", comment_event("/bisect go", issue=3, issue_body=issue))
    assert r.json()["status"] == "queued", r.text
    assert queued_specs(state)[-1]["range"]["bad"] == abbrev(h.bad)
    # the reporter edits that comment: its latest text is the issue's latest form
    edited = fixed.replace(f"\n{abbrev(h.good)}\n", f"\n{abbrev(h.shas[1])}\n", 1)
    r = bot.send("issue_comment", comment_event("Corrected:\n\n" + edited, association="NONE",
                                                login="reporter", issue=3, issue_body=issue,
                                                action="edited"))
    assert r.json()["status"] == "form noted"
    r = bot.send("issue_comment", comment_event("/bisect go", issue=3, issue_body=issue))
    assert r.json()["status"] == "queued", r.text
    assert queued_specs(state)[-1]["range"] == {"repo": str(h.path), "good": abbrev(h.shas[1]),
                                                "bad": abbrev(h.bad)}


def test_a_long_issue_keeps_its_correction_within_the_triage_budget(
        tmp_path: Path, gh: GitHubStandIn, start_bot: StartBot) -> None:
    """triage reads at most triage_max_chars: the issue's text is cut, the correction kept."""
    h = history(tmp_path, n_commits=4)
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, state, workers=0,
                                 jobs_per_user_per_hour=20, triage_max_chars=6000))
    wrong = abbrev(h.shas[1])
    issue = form(last_good=abbrev(h.good), first_bad=wrong, model="facebook/opt-125m") + (
        "\nServer log:\n" + "INFO 12-01 10:00:00 engine.py: step done\n" * 200)
    assert len(issue) > 6000
    bot.send("issue_comment", comment_event("/bisect", issue=2, issue_body=issue))
    fixed = block_of(gh.comments[-1].body).replace(f"\n{wrong}\n", f"\n{abbrev(h.bad)}\n", 1)
    r = bot.send("issue_comment", comment_event("/bisect go\n\n" + fixed, issue=2,
                                                issue_body=issue))
    assert r.json()["status"] == "queued", r.text
    assert queued_specs(state)[-1]["range"]["bad"] == abbrev(h.bad)
