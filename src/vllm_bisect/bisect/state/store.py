"""Where measurements live: this session's journal, then the result cache shared by sessions.

Both are keyed by ``BisectSpec.measurement_key(commit)``. ``get`` finds a measurement this
session or an earlier one already has; ``put`` caches a fresh one; ``record`` journals a
judged one (once per session and key, unless it is a fresh run of a commit measured before);
``unmeasured`` says which commits would need a server (what is worth prefetching).
Measurements are the GPU's as much as the commit's: a session whose servers ran on other GPUs
than this machine's is refused, and the cache's from other GPUs are not reused
(:mod:`~vllm_bisect.bisect.state.device`).
"""

from __future__ import annotations

from vllm_bisect.bisect.policies.base import MoreSamples
from vllm_bisect.bisect.state.device import (
    check_session,
    compared,
    same_device,
    this_machine,
)
from vllm_bisect.bisect.state.journal import ResultCache, SessionJournal
from vllm_bisect.models import Evaluation, Outcome
from vllm_bisect.spec import BisectSpec


class MeasurementStore:
    def __init__(self, spec: BisectSpec, journal: SessionJournal,
                 cache: ResultCache | None) -> None:
        self.spec = spec
        self.journal = journal
        self.cache = cache
        self.here = this_machine() if compared(spec) else None   # this machine's GPUs
        history = journal.evaluation_history()
        check_session(history, self.here, journal.dir)
        self.session = dict(history)   # the latest evaluation per key
        self.rest = False   # journaling a rest check's search (bisect/driver.py sets it)

    @property
    def judge(self) -> str:
        """Who judges what this store journals: the symptom, "<symptom>/rest" for a rest
        check's search; a replay of verdicts reads its own judge's only."""
        symptom = self.spec.verdict.symptom.value
        return f"{symptom}/rest" if self.rest else symptom

    def key(self, commit: str) -> str:
        return self.spec.measurement_key(commit)

    def get(self, commit: str, more: MoreSamples | None = None) -> Evaluation | None:
        """A measurement this session or the result cache already has (one with too few
        samples for ``more`` does not count: it is measured again)."""
        key = self.key(commit)
        for source in (self.session, self.cache):
            found = source.get(key) if source is not None else None
            if found is not None and source is self.cache and not same_device(found, self.here):
                continue   # measured on other GPUs: measured again here
            if found is not None and not (more and found.measurement and more(found.measurement)):
                return found
        return None

    def put(self, ev: Evaluation) -> None:
        """Cache a fresh evaluation for later sessions (failures are never cached)."""
        if self.cache is not None:
            self.cache.put(self.key(ev.commit), ev)

    def record(self, outcome: Outcome, ev: Evaluation, cached: bool, told: bool = True) -> None:
        """Journal a judged evaluation (a cached one only once per session); ``told``: a
        judged commit of the result (else kept for what follows only: a rest check's)."""
        key = self.key(outcome.commit)
        if not cached or key not in self.session:
            self.journal.record(key, outcome, ev, told, self.judge)
            self.session[key] = ev

    def unmeasured(self, commits: list[str]) -> list[str]:
        return [c for c in commits if self.get(c) is None]
