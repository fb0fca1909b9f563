"""The steps a run of every symptom found (:class:`Culprit`, :class:`MultiResult`), their
effect, the headline commit among them and result.json's ``culprits``
(:mod:`~vllm_bisect.bisect.multi` finds them)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vllm_bisect.bisect.driver import BisectResult
from vllm_bisect.bisect.endpoint_doc import EndpointEnvDoc
from vllm_bisect.models import Evaluation
from vllm_bisect.spec import Symptom
from vllm_bisect.verdict.auto import samples_of


@dataclass(frozen=True)
class Culprit:
    """One step of one symptom: the first bad commit of the range it searched."""

    symptom: str
    step: int                 # 1: the symptom's search; 2, 3..: the rest after the one before
    commit: str | None        # None: no single culprit (``candidates``)
    subject: str
    good: str                 # the range this search ran over
    bad: str
    effect: float | None      # the symptom's median at the culprit / at its parent
    server_starts: int
    candidates: tuple[str, ...] = ()
    note: str = ""            # the rest check's conclusion, or why the symptom found nothing
    confirmed: bool = True    # False: against its parent alone it did not separate

    def describe(self) -> str:
        size = f"{self.effect:.2f}x {self.symptom} change" if self.effect else self.symptom
        if self.commit is None:
            return f"{size}: no single culprit ({len(self.candidates)} candidates)"
        return (f"{size} at {self.commit[:12]} {self.subject}".rstrip()
                + ("" if self.confirmed else " (not confirmed)"))


@dataclass
class MultiResult:
    result: BisectResult            # the first search's, with every search's counts
    culprits: list[Culprit] = field(default_factory=list)
    endpoint_env: EndpointEnvDoc | None = None   # the endpoints' environments (result.json)

    def summary(self) -> str:
        """'a 1.31x itl change at X, and another 1.29x itl change at Y'."""
        found = [c.describe() for c in self.culprits if c.commit is not None and c.confirmed]
        return "a " + ", and another ".join(found) if found else "no culprit"


def _median(ev: Evaluation | None, symptom: Symptom) -> float | None:
    xs = samples_of(ev.measurement if ev is not None else None, symptom)
    return statistics.median(xs) if xs else None


def step_effect(result: BisectResult, evaluations: dict[str, Evaluation],
                symptom: Symptom) -> float | None:
    """The culprit's median over its parent's (the commit before it, or the range's good
    end), from the measurements taken (verification's when it ran)."""
    rng, sha = result.range, result.first_bad
    if sha is None:
        return None
    parent = rng.sha(rng.index(sha) - 1)
    v = result.verification
    if v is not None and v.culprit_measurement is not None and v.parent_measurement is not None:
        a = statistics.median(samples_of(v.culprit_measurement, symptom) or [0.0])
        b = statistics.median(samples_of(v.parent_measurement, symptom) or [0.0])
    else:
        a = _median(evaluations.get(sha), symptom) or 0.0
        b = _median(evaluations.get(parent), symptom) or 0.0
    return a / b if a and b else None


def headline(out: MultiResult) -> BisectResult:
    """The first bad commit is the first search's culprit unless its pair check did not
    confirm it: then the earliest confirmed step of that symptom (the verification and
    confidence, of the other commit, are dropped)."""
    r, mine = out.result, [c for c in out.culprits if c.commit == out.result.first_bad]
    ok = [c for c in out.culprits if c.confirmed and c.commit is not None
          and mine and c.symptom == mine[0].symptom]
    if not mine or mine[0].confirmed or not ok:
        return r
    sha = min(ok, key=lambda c: r.range.index(c.commit or "")).commit
    return replace(r, first_bad=sha, candidates=[sha] if sha else [], verification=None,
                   confidence=None)


def culprit_docs(multi: MultiResult) -> list[dict[str, Any]] | None:
    """result.json's ``culprits``: one entry per symptom and step, with the rest checks'
    notes (None when a single search found its culprit and nothing else ran)."""
    if len(multi.culprits) <= 1 and not any(c.note for c in multi.culprits):
        return None
    return [{**asdict(c), "candidates": list(c.candidates), "summary": c.describe()}
            for c in multi.culprits]
