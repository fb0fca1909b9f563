"""``vllm-bisect run`` end to end: one bisect session
(:func:`vllm_bisect.bisect.run_session.run_session`) and the files a finished one leaves:
result.json (:class:`~vllm_bisect.report.result.BisectReport`) and the reports (report.md,
report.html). Used by the CLI (``run``, ``demo``, ``watch``) and the bot's worker; it prints
nothing."""

from __future__ import annotations

from pathlib import Path

from vllm_bisect.bisect.culprits import MultiResult, culprit_docs
from vllm_bisect.bisect.driver import BisectResult, EventHandler
from vllm_bisect.bisect.run_session import run_session
from vllm_bisect.report.result import BisectReport
from vllm_bisect.spec import BisectSpec

__all__ = ["run_bisect", "write_result_files"]


def run_bisect(spec: BisectSpec, session_dir: Path, cache_dir: Path,
               events: EventHandler) -> BisectResult:
    """One bisect, its result.json and its reports; a full disk or a damaged database
    anywhere is the project's error."""

    def finish(session: Path, multi: MultiResult) -> None:
        write_result_files(session, multi, spec)

    return run_session(spec, session_dir, cache_dir, events, finish)


def write_result_files(session_dir: Path, multi: MultiResult, spec: BisectSpec) -> None:
    """result.json (every symptom's culprit, the effect at it, the studies to offer), then
    report.md and report.html."""
    from vllm_bisect.isolate.offers import next_questions
    from vllm_bisect.report.effects import effect_docs, servers_of
    from vllm_bisect.report.render import write_reports

    offers = next_questions(multi.result.first_bad, spec.range.repo, spec.build.kind)
    report = BisectReport.of(multi.result)
    effects = effect_docs(report, spec.verdict, servers_of(multi.result))
    report.model_copy(update={
        "culprits": culprit_docs(multi), "endpoint_env": multi.endpoint_env,
        "next_questions": offers, "effects": effects}).write(session_dir / "result.json")
    write_reports(session_dir)
