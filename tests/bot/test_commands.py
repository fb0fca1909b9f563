"""A bare /bisect builds its job from the issue's triage (pure functions, no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_bisect.bot.commands import job_spec, split_go, triage_comment
from vllm_bisect.bot.config import BotConfig
from vllm_bisect.errors import SpecError

CORPUS = Path(__file__).parent.parent / "triage" / "corpus"
BASE = BotConfig(base_spec={"range": {"repo": "/srv/vllm"}, "build": {"kind": "wheel"}})


def report(name: str) -> str:
    return (CORPUS / name / "report.md").read_text()


def test_fix_report_becomes_a_fix_search() -> None:
    plan = job_spec(BASE, None, report("founding-59520-zh"))
    spec = plan.spec
    assert spec["range"]["search"] == "fix"
    assert spec["range"]["good"] == "21c08ac4589" and spec["range"]["bad"].startswith("e4294144a8")
    assert "speculative" not in spec["serve"] and spec["probe"]["bench"]["kind"] == "throughput"
    # the benchmark's flags are allowlisted too; the report's env var is not (refused, named)
    assert spec["probe"]["bench"]["args"] == ["--async-engine", "--dataset-name",
                                              "prefix_repetition", "--num-prompts", "200"]
    assert any("VLLM_GDN_DECODE_KERNEL" in r for r in plan.refused)
    assert "fix report" in plan.read  # the same text as triage_comment, from one triage run
    text = triage_comment(None, report("founding-59520-zh"))
    assert "fix report" in text and "first fixed commit" in text
    assert "VLLM_GDN_DECODE_KERNEL=triton" in text  # the suggested A/B


def test_explicit_refs_skip_the_triage_comment_and_missing_refs_show_it() -> None:
    assert triage_comment("good=abc1234 bad=def5678", report("founding-47297-en")) == ""
    with pytest.raises(SpecError) as e:
        job_spec(BASE, "", report("founding-mtp-sweep-zh"))
    assert "what I read" in (e.value.hint or "") and "f4517815" not in (e.value.hint or "")


def test_the_plan_names_the_refs_it_read_and_go_is_the_first_word_only() -> None:
    text = report("founding-47297-en")
    assert job_spec(BASE, None, text).triaged == ("good", "bad")
    one = job_spec(BASE, "good=abc1234", text)
    assert one.triaged == ("bad",) and "what I read" in one.read  # shown: bad came from it
    both = job_spec(BASE, "good=abc1234 bad=def5678", text)
    assert both.triaged == () and both.read == ""
    assert split_go("go") == (True, "") and split_go(" go  good=abc1234 ") == (True,
                                                                              "good=abc1234")
    assert split_go("good=abc1234 go") == (False, "good=abc1234 go")
    assert split_go(None) == (False, "") and split_go("gone") == (False, "gone")
