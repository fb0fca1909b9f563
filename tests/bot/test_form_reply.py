"""The bot's first reply on a free-text report (issue 44), through its real HTTP port, the
GitHub stand-in and a live worker: every value marked guessed with its sentence, a
ready-to-edit reply in the form's shape, no GPU time before `/bisect go`; a wrong range is
refused at the endpoint check with the measured numbers; the corrected form is read exactly."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.bot.botkit import Bot, comment_event, final, queued_specs, wait_for, write_config
from tests.bot.github_standin import GitHubStandIn
from tests.helpers import abbrev, history

StartBot = Callable[[Path], Bot]
ITL_THRESHOLD = {"symptom": "itl", "strategy": "threshold", "itl_factor": 2.0,
                 "intermittent_runs": 1}


def test_a_guessed_range_waits_for_go_and_a_wrong_one_is_refused_with_numbers(
        tmp_path: Path, gh: GitHubStandIn, start_bot: StartBot) -> None:
    h = history(tmp_path, n_commits=6, slow_at=4)   # commits 4.. decode 7x slower
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, state, workers=1,
                                 jobs_per_user_per_hour=10,
                                 base_over={"verdict": ITL_THRESHOLD}))
    gh.permissions["maintainer"] = "maintain"
    wrong = h.shas[3]   # before the slowdown: this "bad" end is good
    body = (f"Decode got slower. ITL was fine at `{abbrev(h.good)}` (good).\n"
            f"Since `{abbrev(wrong)}` the ITL is about 7x higher (bad).\n")
    r = bot.send("issue_comment", comment_event("/bisect", issue=9, issue_body=body))
    assert r.json()["status"] == "awaiting confirmation", r.text
    ask = gh.comments[-1].body
    assert "This issue is free text, so every value below is **guessed**" in ask
    assert (f"| range.bad (bad) | `{abbrev(wrong)}` | guessed | 2 | “Since `{abbrev(wrong)}` the "
            "ITL is about 7x higher (bad).” | line 2: 'Since' before it |") in ask, ask
    assert re.search(r"\| symptom \| `itl` \| guessed \| \d \| “", ask), ask
    assert "**read**" not in ask
    # the ready-to-edit reply: the reading in the form's shape
    assert f"````markdown\n### Last good (fix search: last broken)\n\n{abbrev(h.good)}\n" in ask
    assert f"### First bad (fix search: first fixed)\n\n{abbrev(wrong)}\n" in ask
    assert "- [X] ITL: decoding is slower per output token" in ask
    assert ask.endswith("Comment `/bisect go` to start this bisect, or "
                        "`/bisect good=<ref> bad=<ref>` to correct it.")
    # no GPU time before go: nothing queued, no session, though the worker is live (it runs
    # the go below), after a bare /bisect and a label by a maintainer
    labeled = {"action": "labeled", "label": {"name": "bisect"},
               "issue": {"number": 9, "body": body},
               "repository": {"full_name": "vllm-project/vllm"}, "sender": {"login": "maintainer"}}
    assert bot.send("issues", labeled).json()["status"] == "awaiting confirmation"
    assert queued_specs(state) == [] and not (state / "sessions").exists()
    # go: the guessed range runs; the endpoint check refuses it with what it measured
    r = bot.send("issue_comment", comment_event("/bisect go", issue=9, issue_body=body))
    assert r.json()["status"] == "queued", r.text
    ack = gh.comments[-1]
    wait_for(lambda: final(ack), context=bot.output)
    refused = re.search(rf"inconclusive: did not reproduce: bad endpoint {wrong[:12]} judged good "
                        r"\(expected bad\): ITL (?P<itl>[\d.]+) ms <= (?P<limit>[\d.]+) ms",
                        ack.body)
    assert refused, ack.body
    assert float(refused["itl"]) <= float(refused["limit"])
    assert "No commit is blamed" in ack.body
    # the reporter corrects the form block in the issue and says go: read exactly, run right
    block = ask.split("````markdown\n", 1)[1].split("\n````", 1)[0]
    fixed = body + "\n" + block.replace(f"\n{abbrev(wrong)}\n", f"\n{abbrev(h.bad)}\n", 1)
    r = bot.send("issue_comment", comment_event("/bisect go", issue=9, issue_body=fixed))
    assert r.json()["status"] == "queued", r.text
    ack = gh.comments[-1]
    assert "values marked **read** are its answers" in ack.body
    assert f"| range.bad (bad) | `{abbrev(h.bad)}` | **read** |" in ack.body
    assert "````markdown" not in ack.body   # queued: no reply to edit
    assert queued_specs(state)[-1]["range"] == {"repo": str(h.path), "good": abbrev(h.good),
                                                "bad": abbrev(h.bad)}
    wait_for(lambda: final(ack), context=bot.output)
    assert "finished" in ack.body and h.planted["itl"] in ack.body, ack.body
