"""A commit's repeated runs, replayed from the journal on resume: a session cut after some
of them does not measure them again (each run is a server start)."""

from __future__ import annotations

from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.models import Verdict


def past_runs(t: Tester, commit: str) -> list[Verdict]:
    """The verdicts this session journaled for ``commit``, oldest first: this search's
    symptom's (another symptom's search, or a rest check, judged the same servers its way)."""
    history = t.store.journal.verdict_history(t.store.judge)
    return [v for v, _ in history.get(t.store.key(commit), [])]


class Runs:
    """A commit's repeated runs: the journaled ones first (``skip`` of them already spent
    elsewhere), then fresh servers."""

    def __init__(self, t: Tester, info: CommitInfo, role: Role, steps_left: int,
                 skip: int = 0) -> None:
        self.t, self.info, self.role, self.steps_left = t, info, role, steps_left
        self.past = past_runs(t, info.sha)[skip:]
        self.done = skip

    def next(self) -> Verdict:
        i, self.done = self.done, self.done + 1
        if self.past:
            return self.past.pop(0)
        return self.t.test(self.info, self.role, self.steps_left, fresh=i > 0).verdict
