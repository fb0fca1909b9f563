"""Typed data between layers: an evaluation's failure, log and two-level samples are fields,
and records written before those fields existed are read into them."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_bisect.bisect.policies.threshold import crashed, unmeasured
from vllm_bisect.models import EvalStatus, Evaluation, FailureKind, Verdict
from vllm_bisect.spec import parse_spec

CRASH = parse_spec({"verdict": {"symptom": "crash", "strategy": "threshold"}})


def test_the_crash_rule_reads_the_typed_failure_not_the_reason() -> None:
    died = Evaluation(commit="c", status=EvalStatus.FAILED, reason="the server went away",
                      failure=FailureKind.SERVE)
    assert crashed(CRASH, died) and unmeasured(CRASH, died).verdict is Verdict.BAD
    # a reason that names an error class decides nothing when the failure says otherwise
    other = Evaluation(commit="c", status=EvalStatus.FAILED, reason="ServeError: quoted",
                       failure=FailureKind.INTERNAL)
    assert not crashed(CRASH, other) and unmeasured(CRASH, other).verdict is Verdict.SKIP
    probe = died.model_copy(update={"failure": FailureKind.PROBE})
    assert crashed(CRASH, probe)
    assert not FailureKind.OTHER.crash and not FailureKind.INTERNAL.crash


def test_a_record_from_before_the_fields_is_read_into_them() -> None:
    old = {"commit": "c", "status": "failed",
           "reason": "ServeError: server exited with code 1 (log: /x/serve-c.log)",
           "environment": {"gpu": "H200", "two_level_samples": [[1.0, 2.0], [3.0]]}}
    ev = Evaluation.model_validate_json(json.dumps(old))
    assert ev.failure is FailureKind.SERVE and ev.log == Path("/x/serve-c.log")
    assert ev.samples == [[1.0, 2.0], [3.0]] and ev.environment == {"gpu": "H200"}
    assert crashed(CRASH, ev)
    # written now: the fields round-trip as they are
    again = Evaluation.model_validate_json(ev.model_dump_json())
    assert again == ev
    plain = Evaluation.model_validate({"commit": "c", "status": "failed", "reason": "x"})
    assert plain.failure is None and plain.log is None and plain.samples is None
