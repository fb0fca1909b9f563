"""The one result model of a finished bisect: what ``--json`` prints, ``result.json`` holds,
and report.md, report.html and the bot's comment are rendered from.

Built once from the driver's :class:`~vllm_bisect.bisect.driver.BisectResult`
(:meth:`BisectReport.of`), written as JSON, read back with :meth:`BisectReport.read`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from vllm_bisect.bisect.endpoint_doc import EndpointEnvDoc
from vllm_bisect.bisect.search.range_model import RangeModel
from vllm_bisect.errors import SessionError
from vllm_bisect.models import FailureKind, Measurement, Verdict
from vllm_bisect.report.sections import STUDIES

if TYPE_CHECKING:
    from vllm_bisect.bisect.driver import BisectResult, FlakySeen
    from vllm_bisect.models import Evaluation, Verification

RESULT_SCHEMA = 1


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class PerRequest(_Doc):
    """Per-request samples (the effect's bootstrap CI is computed from these)."""

    itl_ms: list[float | None]
    output_tokens: list[int]
    text_sha256: list[str | None]

    @classmethod
    def of(cls, m: Measurement | None) -> PerRequest | None:
        if m is None:
            return None
        return cls(itl_ms=[r.itl_ms for r in m.requests],
                   output_tokens=[r.output_tokens for r in m.requests],
                   text_sha256=[r.text_sha256 for r in m.requests])


def _lean(m: Measurement | None) -> Measurement | None:
    """The aggregates only: per-request samples go into ``per_request``."""
    return None if m is None else m.model_copy(update={"requests": []})


class JudgedCommit(_Doc):
    commit: str
    index: int | None        # position in the range: 0 the good endpoint, n the bad one
    subject: str | None
    verdict: Verdict
    reason: str
    from_cache: bool = False
    artifact: str | None = None
    environment: dict[str, Any] | None = None
    measurement: Measurement | None = None
    per_request: PerRequest | None = None
    failure: FailureKind | None = None  # why it has no measurement (the crash symptom reads it)
    log: str | None = None    # a skip's build or server log (the cause is in it)
    cause: str | None = None  # a skip's cause: the error line of that log's tail
    servers: int | None = None  # a two-level verdict's servers (None: one, or not kept)
    # a row of BisectReport.judged() whose final verdict is not its first: the first one
    # (derived, never written: result.json keeps each judgement as it was made)
    first_verdict: Verdict | None = Field(default=None, exclude=True)

    def moved(self, labels: dict[str, str] | None = None) -> str:
        """" (first judged bad)" where the row's final verdict is not its first (``labels``:
        a fix search's words for good and bad), else ""."""
        v = self.first_verdict
        return f" (first judged {(labels or {}).get(v.value, v.value)})" if v else ""


class RangeModelDoc(RangeModel):
    """``verdict.strategy = "changepoint"``: what the model of the range concluded
    (:class:`~vllm_bisect.bisect.search.range_model.RangeModel`, written as it is; report.html
    draws its ``posterior``), and the sentence the reports print."""

    def text(self, culprit: str | None) -> str:
        what = f"P(first bad is {culprit[:12]})" if culprit else "P(the likeliest commits)"
        if self.rate_before is not None:
            return (f"Model of the range: {what} = {self.p:.4f}; shown by {self.effect:.0%} of "
                    f"the new side's servers (95% interval {self.effect_lo:.0%} to "
                    f"{self.effect_hi:.0%}), {self.rate_before:.0%} of the old side's; P(no "
                    f"change) = {self.none:.3g}; from {self.servers} servers")
        return (f"Model of the range: {what} = {self.p:.4f}; the step {self.effect:.3g}x "
                f"(95% interval {self.effect_lo:.3g}x to {self.effect_hi:.3g}x); P(no step "
                f"that matters) = {self.none:.3g}, P(a drift) = {self.drift:.3g}; from "
                f"{self.servers} servers")


class VerificationDoc(_Doc):
    """The culprit and its parent judged again once the search was over: on fresh servers
    (``source = "fresh"``, ``samples`` requests asked for each), or from the servers the
    search's confirmation judged them on at the whole-bisect bound (``"confirmation"``)."""

    culprit: str
    parent: str
    samples: int
    confirmed: bool
    source: str = "fresh"
    culprit_servers: int = 0   # the servers each verdict rests on
    parent_servers: int = 0
    culprit_verdict: Verdict
    culprit_reason: str
    parent_verdict: Verdict
    parent_reason: str
    culprit_per_request: PerRequest | None = None
    parent_per_request: PerRequest | None = None
    # a two-level verdict's samples of its symptom, one list per server (natural scale): the
    # effect's interval over the servers (report/effects.py)
    culprit_server_samples: list[list[float]] | None = None
    parent_server_samples: list[list[float]] | None = None

    @classmethod
    def of(cls, v: Verification | None) -> VerificationDoc | None:
        if v is None:
            return None
        return cls(culprit=v.culprit, parent=v.parent, samples=v.samples,
                   confirmed=v.confirmed, source=v.source,
                   culprit_servers=v.culprit_runs or len(v.culprit_servers or []) or 1,
                   parent_servers=v.parent_runs or len(v.parent_servers or []) or 1,
                   culprit_verdict=v.culprit_verdict,
                   culprit_reason=v.culprit_reason, parent_verdict=v.parent_verdict,
                   parent_reason=v.parent_reason,
                   culprit_per_request=PerRequest.of(v.culprit_measurement),
                   parent_per_request=PerRequest.of(v.parent_measurement),
                   culprit_server_samples=v.culprit_servers or None,
                   parent_server_samples=v.parent_servers or None)


class EffectDoc(_Doc):
    """The culprit against its last good parent on one metric, with its 95% interval and
    what that rests on (verdict/stats.py's ``Effect``; report/effects.py works it out).
    ``interval``: bootstrap (the requests resampled), servers (a t interval over the
    servers' means), exact (no spread on either side), none (too few requests);
    ``source``: where the samples came from; ``text``: the report's line."""

    metric: str
    before: float
    after: float
    change: float
    ci_low: float | None
    ci_high: float | None
    interval: str
    requests_before: int
    requests_after: int
    servers_before: int
    servers_after: int
    source: str
    text: str


class FlakyDoc(_Doc):
    """The symptom came and went in this run (auto on a cap switched to bayes)."""

    reason: str
    recheck_runs: int          # verdict.recheck_runs of this run
    advised_recheck_runs: int  # the setting that buys >= 95% exact on a flaky cap

    @classmethod
    def of(cls, f: FlakySeen | None) -> FlakyDoc | None:
        return None if f is None else cls(reason=f.reason, recheck_runs=f.recheck_runs,
                                           advised_recheck_runs=f.advised_runs)

    def text(self) -> str:
        """One paragraph for the report and the terminal."""
        head = ("The symptom came and went in this run (flaky), so the Bayesian search "
                f"judged it from every run: {self.reason.removeprefix('auto: ')}.")
        if self.recheck_runs >= self.advised_recheck_runs:
            return head
        return (f"{head} A flaky symptom can also go unseen: with `verdict.recheck_runs = "
                f"{self.recheck_runs}` a cap shown in half the runs is found exactly in ~88% "
                f"of simulated bisects; `verdict.recheck_runs = {self.advised_recheck_runs}` "
                "buys >= 95% for the next bisect of this symptom (docs/benchmarks.md).")


class BisectReport(_Doc):
    """A finished bisect. ``probed`` is in the order commits were judged (a commit judged
    twice appears twice); :meth:`judged` is one row per commit in range order."""

    schema_version: int = RESULT_SCHEMA
    # search = "fix": old = has the problem, new = fixed, and first_bad is the first fixed
    # commit (the bisect ran with inverted terms)
    search: str = "regression"
    first_new_label: str = "first bad commit"
    first_bad: str | None
    first_bad_subject: str | None = None
    candidates: list[str]
    good: str
    bad: str
    n_commits: int
    probed: list[JudgedCommit]
    verification: VerificationDoc | None = None
    # the culprit against its parent, per metric that matters, with its interval (None: a
    # result.json written before effects were kept; the report works them out)
    effects: list[EffectDoc] | None = None
    confidence: float | None = None
    model: RangeModelDoc | None = None   # changepoint: the model of the range's conclusion
    # verdict.strategy = "auto": the strategy it chose for the symptom, and why
    strategy_chosen: str | None = None
    strategy_reason: str | None = None
    flaky: FlakyDoc | None = None    # the symptom came and went (auto switched to bayes)
    # every server start, the verification's included (the sum of starts_by_phase when
    # there is one); verify_server_starts: the verification's of them
    server_starts: int = 0
    verify_server_starts: int = 0
    # every start of the session (every call: a resume too), by phase (models.Phase), and
    # what plain `git bisect run` would have started: one server per step, ceil(log2 n)
    starts_by_phase: dict[str, int] = Field(default_factory=dict)
    plain_bisect_starts: int = 0
    calls: int = 1                   # the calls that worked on the session (1 + resumes)
    rounds: int = 0
    workers: int = 1
    wall_s: float = 0.0
    # predicted before the search (bisect/forecast.py) against what it took
    forecast: dict[str, Any] | None = None
    # the studies of the culprit, each under its own key of result.json once run
    # (report.sections.STUDIES; each study's package owns its document's model and render,
    # which validate it when the report renders it): key -> the document as written
    studies: dict[str, dict[str, Any]] = Field(default_factory=dict, exclude=True)
    # one entry per symptom and step (bisect.multi: verdict.symptoms and the rest check;
    # absent when one search found one culprit and nothing more was checked)
    culprits: list[dict[str, Any]] | None = None
    # the endpoints' environments side by side: packages, VLLM_* variables, GPU / driver /
    # CUDA (bisect/endpoint_doc.py; absent when the run never reached a search step)
    endpoint_env: EndpointEnvDoc | None = None
    # study -> the line offering it (vllm_bisect.isolate.offers, worked out when written)
    next_questions: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _gather_studies(cls, data: Any) -> Any:
        """result.json's study keys (top level, one per study that ran) into ``studies``."""
        if not isinstance(data, dict) or "studies" in data:
            return data
        return {**{k: v for k, v in data.items() if k not in STUDIES},
                "studies": {k: data[k] for k in STUDIES if data.get(k) is not None}}

    @model_serializer(mode="wrap")
    def _without_unrun_studies(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Each study that ran under its own top-level key, after ``forecast``; a study that
        has not run has no key (its absence is what offers it)."""
        data = handler(self)
        if not isinstance(data, dict):
            return data
        for key in ("culprits", "endpoint_env", "flaky"):
            if data.get(key) is None:
                data.pop(key, None)
        studies = {k: self.studies[k] for k in STUDIES if k in self.studies}
        if not studies or "forecast" not in data:
            return {**data, **studies}
        out: dict[str, Any] = {}
        for key, value in data.items():
            out[key] = value
            if key == "forecast":
                out |= studies
        return out

    @classmethod
    def of(cls, result: BisectResult) -> BisectReport:
        commits = (result.range.good, *result.range.commits)
        subjects = {c.sha: c.subject for c in commits}
        order = {c.sha: i for i, c in enumerate(commits)}
        probed = []
        for o in result.probed:
            ev = result.evaluations.get(o.commit)
            probed.append(JudgedCommit(
                commit=o.commit, index=order.get(o.commit), subject=subjects.get(o.commit),
                verdict=o.verdict, reason=o.reason, from_cache=o.from_cache,
                artifact=ev.artifact if ev else None, environment=ev.environment if ev else None,
                measurement=_lean(o.measurement), per_request=PerRequest.of(o.measurement),
                failure=ev.failure if ev else None,
                servers=len(ev.samples) if ev and ev.samples else None,
                **(_skip_cause(ev) if ev and o.verdict is Verdict.SKIP else {})))
        return cls(search=result.search,
                   first_new_label=("first fixed commit" if result.search == "fix"
                                    else "first bad commit"),
                   first_bad=result.first_bad,
                   first_bad_subject=subjects.get(result.first_bad or ""),
                   candidates=list(result.candidates), good=result.range.good.sha,
                   bad=result.range.bad.sha, n_commits=len(result.range.commits),
                   probed=probed, verification=VerificationDoc.of(result.verification),
                   confidence=result.confidence, strategy_chosen=result.strategy_chosen,
                   model=(RangeModelDoc(**result.model.model_dump())
                          if result.model is not None else None),
                   strategy_reason=result.strategy_reason, flaky=FlakyDoc.of(result.flaky),
                   server_starts=(sum(result.starts_by_phase.values())
                                  if result.starts_by_phase
                                  else result.server_starts + result.verify_server_starts),
                   verify_server_starts=result.verify_server_starts,
                   starts_by_phase=result.starts_by_phase,
                   plain_bisect_starts=plain_starts(len(result.range.commits)),
                   calls=result.calls, rounds=result.rounds, workers=result.workers,
                   wall_s=round(result.wall_s, 3),
                   forecast=_forecast(result))

    def culprit_lines(self) -> list[str]:
        """One line per symptom and step (``culprits``), each with its note."""
        found = [str(c.get("summary")) for c in self.culprits or []
                 if c.get("commit") and c.get("confirmed", True)]
        out = ["a " + ", and another ".join(found)] if len(found) > 1 else []
        for c in self.culprits or []:
            what = f"`{c.get('symptom')}` step {c.get('step')}: {c.get('summary')}"
            note = str(c.get("note") or "").replace("\n", "; ")
            out.append(what if c.get("commit") or c.get("candidates") else
                       f"`{c.get('symptom')}`: {note}")
            if c.get("note") and (c.get("commit") or c.get("candidates")):
                out += [f"  {line}" for line in str(c.get("note")).splitlines()]
        return out

    def judged(self) -> list[JudgedCommit]:
        """One row per judged commit, in range order: its first judgement's measurement with
        its final verdict (:meth:`_final`); where that differs from the first, the row's
        reason says so."""
        seen: dict[str, list[JudgedCommit]] = {}
        for p in self.probed:
            seen.setdefault(p.commit, []).append(p)
        cut = seen[self.first_bad][0].index if self.first_bad in seen else None
        rows = []
        for ps in seen.values():
            final, why = self._final(ps, cut)
            first = ps[0]
            rows.append(first if final is first.verdict else first.model_copy(update={
                "verdict": final, "first_verdict": first.verdict,
                "reason": f"{first.reason}; {final.value} in the end: {why}"}))
        return sorted(rows, key=lambda p: (p.index is None, p.index or 0))

    def _final(self, ps: list[JudgedCommit], cut: int | None) -> tuple[Verdict, str]:
        """A commit's verdict once the bisect was over (``cut``: the named culprit's index).
        Under the model of the range (``model``) a commit's side is where the culprit puts
        it: the model judged it again at every later server, at this commit or another.
        Otherwise its last judgement that is not a skip (a commit judged again, such as by the
        verification)."""
        decided = [p.verdict for p in ps if p.verdict is not Verdict.SKIP]
        if not decided:
            return ps[0].verdict, ""
        at = ps[0].index
        if self.model is not None and cut is not None and at is not None:
            before = at < cut
            return (Verdict.GOOD if before else Verdict.BAD,
                    f"the model of the range, from every server, puts it "
                    f"{'before' if before else 'at or after'} the {self.first_new_label}")
        return decided[-1], f"judged {decided[-1].value} again later"

    def culprit(self) -> JudgedCommit | None:
        return next((p for p in self.judged() if p.commit == self.first_bad), None)

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> BisectReport:
        try:
            return cls.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as err:
            raise SessionError(f"{path} cannot be read: {str(err).splitlines()[0]}",
                               hint=f"write it again with: vllm-bisect run --session "
                                    f"{path.parent}") from None


def plain_starts(n: int) -> int:
    """Server starts of a plain ``git bisect run`` over ``n`` commits: one a step."""
    return math.ceil(math.log2(max(2, n)))


def _skip_cause(ev: Evaluation) -> dict[str, Any]:
    """A skipped commit's log and the error line of its tail (the cause its reason omits)."""
    from vllm_bisect.report.cause import cause_line

    return {"log": str(ev.log) if ev.log is not None else None,
            "cause": cause_line(ev.log_tail)}


def _forecast(result: BisectResult) -> dict[str, Any] | None:
    f = result.forecast
    if f is None:
        return None
    out = {"predicted": f.as_dict(), "actual": {"server_starts": result.server_starts,
                                                "hours": round(result.wall_s / 3600, 4)}}
    if result.first_forecast is not None:  # before the search (``predicted``: the latest)
        out["first"] = result.first_forecast.as_dict()
    return out
