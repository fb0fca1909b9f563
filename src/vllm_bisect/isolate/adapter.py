"""The one seam between the studies and today's measuring and judging code.

``Prober.trial(spec, commit)`` builds, serves and probes a commit with today's
:class:`~vllm_bisect.bisect.evaluate.Evaluator` and judges it with today's
:class:`~vllm_bisect.verdict.Judge` (threshold verdicts; a sequential or Bayesian spec is
judged by its thresholds). Measurements are looked up first in the study journal, then in the
bisect session's journal, then in the result cache (all keyed by
``spec.measurement_key(commit)``: commit, build, serve, probe), and only then measured. When
the driver's verdict policy and measurer are re-plugged, only this module changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git

from vllm_bisect.bisect.evaluate import Evaluator
from vllm_bisect.bisect.journal import ResultCache, SessionJournal
from vllm_bisect.builders import Builder, make_builder
from vllm_bisect.errors import SpecError
from vllm_bisect.isolate.journal import StudyJournal
from vllm_bisect.models import EvalStatus, Evaluation, Measurement, Verdict
from vllm_bisect.spec import BisectSpec, Symptom
from vllm_bisect.verdict import Judge
from vllm_bisect.verdict.symptoms import CRASH_MARKERS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trial:
    study: str
    label: str
    commit: str
    verdict: Verdict
    reason: str
    measurement: Measurement | None
    fresh: bool          # measured now (a build and a server start), not reused
    artifact: str | None = None


OnTrial = Callable[[Trial], None]


def check_judgeable(spec: BisectSpec) -> None:
    v = spec.verdict
    if v.symptom is Symptom.ITL and v.max_itl_ms is None and v.itl_factor is None:
        raise SpecError("these studies judge by thresholds, and the spec's itl symptom has none",
                        hint="set verdict.itl_factor (e.g. 1.5) or verdict.max_itl_ms")


def spec_retries(spec: BisectSpec) -> int:
    """How often a failed server is retried (ops.retries)."""
    return spec.ops.retries


def needs_reference(spec: BisectSpec) -> bool:
    return Judge(spec.verdict, spec.min_output_tokens()).needs_reference


class Prober:
    def __init__(self, repo: git.Repo, cache_dir: Path, log_dir: Path, studies: StudyJournal,
                 session: SessionJournal | None = None, session_id: str = "",
                 on_trial: OnTrial | None = None, on_phase: Callable[[str, str], None] | None = None
                 ) -> None:
        self.repo = repo
        self.cache_dir = cache_dir
        self.log_dir = log_dir
        self.studies = studies
        self.session = session
        self.session_id = session_id
        self.bisect_evals = session.evaluations() if session is not None else {}
        self.cache = ResultCache(cache_dir / "results.sqlite")
        self.on_trial = on_trial
        self.on_phase = on_phase
        self._builders: dict[str, Builder] = {}
        self.fresh = 0

    def close(self) -> None:
        self.cache.close()

    def _evaluator(self, spec: BisectSpec) -> Evaluator:
        key = spec.build.model_dump_json()
        if key not in self._builders:
            self._builders[key] = make_builder(spec, self.repo, self.cache_dir, self.log_dir)
        return Evaluator(spec, self._builders[key], self.log_dir, self.session, self.session_id,
                         on_phase=self.on_phase)

    def evaluation(self, spec: BisectSpec, commit: str, study: str, retries: int
                   ) -> tuple[Evaluation, bool]:
        key = spec.measurement_key(commit)
        for found in (self.studies.get(study, key), self.bisect_evals.get(key),
                      self.cache.get(key)):
            if found is not None:
                return found, False
        evaluator = self._evaluator(spec)
        left = 0 if spec.verdict.symptom is Symptom.CRASH else retries
        while True:
            ev = evaluator.evaluate(commit)
            if ev.status is not EvalStatus.FAILED or left <= 0:
                break
            logger.warning("%s failed (%s); trying again on a fresh server", commit[:12],
                           ev.reason)
            left -= 1
        self.cache.put(key, ev)
        self.fresh += 1
        return ev, True

    def trial(self, spec: BisectSpec, commit: str, *, study: str, label: str,
              reference: Measurement | None = None, retries: int | None = None) -> Trial:
        """Measure (or reuse) and judge ``commit`` under ``spec``; journaled under ``study``."""
        ev, fresh = self.evaluation(spec, commit, study,
                                    spec_retries(spec) if retries is None else retries)
        verdict, reason = judge(spec, ev, reference)
        t = Trial(study, label, commit, verdict, reason, ev.measurement, fresh, ev.artifact)
        self.studies.record(study, spec.measurement_key(commit), label, t.verdict, t.reason, ev)
        if self.on_trial is not None:
            self.on_trial(t)
        return t


def judge(spec: BisectSpec, ev: Evaluation, reference: Measurement | None
          ) -> tuple[Verdict, str]:
    """Today's verdict on one evaluation (a failure is a skip, or bad under symptom crash)."""
    if ev.measurement is None:
        if (spec.verdict.symptom is Symptom.CRASH and ev.status is EvalStatus.FAILED
                and any(k in ev.reason for k in CRASH_MARKERS)):
            return Verdict.BAD, f"crashed: {ev.reason}"
        return Verdict.SKIP, ev.reason or ev.status.value
    j = Judge(spec.verdict, spec.min_output_tokens())
    if j.needs_reference and reference is not None:
        j = j.with_reference(reference)
    got = j.judge(ev.measurement)
    return got.verdict, got.reason
