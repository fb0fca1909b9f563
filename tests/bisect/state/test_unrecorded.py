"""Servers measured but not yet recorded, kept in a real session journal (the CLI test is
tests/bisect/test_changepoint_cli.py's killed-while-shutting-down run)."""

from __future__ import annotations

from pathlib import Path

from vllm_bisect.bisect.state import unrecorded
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.models import EvalStatus, Evaluation, Measurement, TokensSource


def ev(commit: str, itl: float, requests: int = 3) -> Evaluation:
    m = Measurement(endpoint="completions", model="m", requested_tokens=16, min_output_tokens=16,
                    output_tokens=[16] * requests, length_ok=True, itl_ms=itl,
                    chunk_itl_ms=itl, tokens_per_chunk=1.0, ttft_ms=1.0, tpot_ms=itl,
                    finish_reasons=["length"] * requests, tokens_source=TokensSource.USAGE)
    return Evaluation(commit=commit, status=EvalStatus.MEASURED, measurement=m)


def test_kept_until_dropped_and_taken_once(tmp_path: Path) -> None:
    j = SessionJournal(tmp_path)
    a1, a2, b = ev("a" * 40, 3.0), ev("a" * 40, 3.5), ev("b" * 40, 5.0)
    for e in (a1, a2, b):
        unrecorded.keep(j, "key-" + e.commit[0], e)
    unrecorded.drop(j, a2)                       # came back: its own row goes, not a1's
    assert unrecorded.take(j, "key-a", None) == a1
    assert unrecorded.take(j, "key-a", None) is None  # taken once
    assert unrecorded.take(j, "key-other", None) is None  # another spec's key: not b's
    # a measurement with fewer requests than the asker's ``more`` wants is not taken
    assert unrecorded.take(j, "key-b", lambda m: 5 - len(m.output_tokens)) is None
    assert unrecorded.take(j, "key-b", lambda m: 0) == b


def test_a_fresh_journal_has_nothing_kept(tmp_path: Path) -> None:
    j = SessionJournal(tmp_path)
    unrecorded.drop(j, ev("c" * 40, 1.0))   # nothing kept: nothing happens
    assert unrecorded.take(j, "key-c", None) is None
