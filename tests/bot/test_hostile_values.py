"""Requested values checked as what they are, through the live bot's HTTP port (issue 26):
a model is a hub id, a path-valued flag takes no path, loader variables are listed as refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.bot.botkit import Bot, comment_event, final, queued_specs, wait_for, write_config
from tests.bot.github_standin import GitHubStandIn
from tests.helpers import abbrev, history


def test_model_and_path_values_are_refused(tmp_path: Path, gh: GitHubStandIn,
                                           start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=3)
    state = tmp_path / "state"
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, state, workers=0,
                                 allowed_models=["Qwen/*"],
                                 allowed_serve_flags=["--generation-config", "--max-model-len"],
                                 allowed_env=["VLLM_ATTENTION_BACKEND", "PYTHONPATH"]))
    for model in ("Qwen/..", "Qwen/.", "Qwen/-x", "Qwen/a..b"):
        r = bot.send("issue_comment",
                     comment_event(f"/bisect good={h.good} bad={h.bad} model={model}"))
        assert r.status_code == 422, (model, r.text)
        assert "is not a Hugging Face model id" in gh.comments[-1].body
    assert queued_specs(state) == []
    body = (f"Regressed: fine at `{abbrev(h.good)}` (good), but `{abbrev(h.bad)}` caps every answer "
            "at 128 tokens (bad).\n\n```\n"
            "LD_PRELOAD=/tmp/evil.so PYTHONPATH=/tmp/x VLLM_ATTENTION_BACKEND=FLASHINFER \\\n"
            "  vllm serve Qwen/Qwen3-8B --generation-config .. --max-model-len 4096\n```\n")
    r = bot.send("issue_comment", comment_event("/bisect", issue=2, issue_body=body))
    assert r.json()["status"] == "awaiting confirmation", r.text  # the range was read
    ask = gh.comments[-1].body
    assert "`/bisect go`" in ask and queued_specs(state) == []
    assert "`LD_PRELOAD`" in ask.split("Not applied", 1)[1]   # shown before it runs
    r = bot.send("issue_comment", comment_event("/bisect go", issue=2, issue_body=body))
    assert r.json()["status"] == "queued", r.text
    ack = gh.comments[-1].body
    refused = ack.split("Not applied", 1)[1]
    assert "`--generation-config ..` (its value names a directory)" in refused, ack
    assert "`LD_PRELOAD`" in refused and "`PYTHONPATH`" in refused, ack
    assert "never set from a request" in refused
    [spec] = queued_specs(state)
    serve = spec["serve"]
    assert isinstance(serve, dict)
    assert "--generation-config" not in serve["args"] and "--max-model-len" in serve["args"]
    assert "LD_PRELOAD" not in serve["env"] and "PYTHONPATH" not in serve["env"]
    assert serve["env"]["VLLM_ATTENTION_BACKEND"] == "FLASHINFER"


HOSTILE_SUBJECT = ("[Core] cc @vllm-project/maintainers ![x](https://evil.invalid/p.png) "
                   "<img src=https://evil.invalid/q.png>")


def test_comments_ping_nobody_and_load_no_image(tmp_path: Path, gh: GitHubStandIn,
                                                start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=6, cap_at=3, subjects=((3, HOSTILE_SUBJECT),))
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state"))
    cmd = comment_event(f"/bisect good={abbrev(h.good, 10)} bad={abbrev(h.bad, 10)} symptom=length",
                        association="NONE", login="drive-by")
    bot.send("issue_comment", cmd)   # an outsider: the reply still pings its author
    assert "Thanks @drive-by!" in gh.comments[-1].body
    assert bot.send("issue_comment", comment_event(
        f"/bisect good={abbrev(h.good, 10)} bad={abbrev(h.bad, 10)} symptom=length"
    )).json()["status"] == "queued"
    ack = gh.comments[-1]
    wait_for(lambda: final(ack), context=bot.output)
    assert h.planted["length"] in ack.body
    for text in [ack.body, *ack.edits]:
        assert " @vllm-project/maintainers" not in text
        assert "![x](https://evil.invalid" not in text and "<img" not in text
    assert any("`@vllm-project/maintainers`" in t for t in [ack.body, *ack.edits])
