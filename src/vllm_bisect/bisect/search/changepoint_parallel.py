"""The change-point search on k workers (``verdict.strategy = "changepoint"``,
``parallel.workers = k > 1``): the same model of the range, measured a round at a time.

Each round picks up to k measurements from one posterior
(:func:`~vllm_bisect.verdict.changepoint_batch.choose_batch`: the commits in doubt, then
the posterior's equal-probability quantiles) and runs them at once on the measurer's
workers, one fresh server each (a commit's first may come from the result cache, as on one
worker); then records them in the order chosen, each server into the model as it is
recorded (its verdict is the model's with the servers recorded before it), and the next
round starts from the new posterior. The range's ends are the first round (both at once).
Everything else (the stop rule, the refusals, the rest checks' rule and their ends, the
skips, ``verdict.max_runs``) is :class:`~vllm_bisect.bisect.search.changepoint.ChangePointSearch`'s;
``rounds`` counts rounds, ``measured`` servers. Rounds are synchronous: a round waits for
its slowest server (the multisection's work-conserving dispatch is not done here).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from vllm_bisect.bisect.policies.base import MoreSamples, Role
from vllm_bisect.bisect.search.changepoint import END_REQUESTS, ChangePointSearch
from vllm_bisect.bisect.tester import phase_of
from vllm_bisect.models import Evaluation, Phase
from vllm_bisect.verdict.changepoint import Posterior
from vllm_bisect.verdict.changepoint_batch import choose_batch

logger = logging.getLogger(__name__)

Pick = tuple[int, int, bool]   # (commit index, requests, adaptive: an end's first server)


class ParallelChangePointSearch(ChangePointSearch):
    """See the module docstring."""

    def _next(self, post: Posterior, usable: list[int], requests: int) -> bool:
        room = max(1, self.v.max_runs - len(self.servers))   # (verdict.max_runs holds)
        picks = choose_batch(post, usable, requests, self.v.confidence,
                             min(self.t.measurer.workers, room),
                             per_commit_limit=self.per_commit_limit())
        if not picks:
            return False
        self.measure_round([(c.index, c.requests, False) for c in picks])
        return True

    def measure_ends_first(self) -> None:
        """Both ends of the range at once, as many requests as each one's spread needs
        (again, the one whose server failed)."""
        ends = [e for e in (-1, self.n - 1) if self.servers_at(e) == 0]
        while ends:
            self.measure_round([(e, max(END_REQUESTS, self.least), True) for e in ends])
            ends = [e for e in ends if self.servers_at(e) == 0]

    def measure_round(self, picks: Sequence[Pick]) -> None:
        """One server for each pick (distinct commits), at once on free workers, recorded
        and added to the model in the order given."""
        t = self.t
        if len(picks) == 1:   # (the one-worker path, the same servers)
            self._measure(*picks[0])
            return
        logger.info("model of the range: a round of %d servers at once: %s", len(picks),
                    ", ".join(str(i) for i, _, _ in picks))
        left = self._last[1].steps_left() if self._last is not None else 0
        found: dict[str, Evaluation] = {}
        missing: dict[str, MoreSamples | None] = {}
        phases: dict[str, Phase] = {}
        for i, requests, adaptive in picks:
            info = t.rng.good if i == -1 else t.rng.commits[i]
            role = self.roles.get(info.sha, Role.BISECT)
            first = self.servers_at(i) == 0 and self.failures[i] == 0
            self.policy.more = self._more(requests, adaptive)   # (read as its trial opens)
            t.events.on_testing(info, role, left)
            known, want = t.lookup(info.sha, role, fresh=not first)
            if known is not None:
                found[info.sha] = known
                continue
            missing[info.sha] = want
            phase = (Phase.REST if self.rest else Phase.ENDPOINTS if role is not Role.BISECT
                     else Phase.SEARCH)
            phases[info.sha] = phase_of(role, phase)
        measured = t.measurer.measure_all(missing, True, phases)
        for sha in missing:
            measured[sha] = t.run_trial(sha, measured[sha])
        self.rounds += 1 if missing else 0
        for i, _, _ in picks:
            info = t.rng.good if i == -1 else t.rng.commits[i]
            role = self.roles.get(info.sha, Role.BISECT)
            ev = found.get(info.sha) or measured[info.sha]
            self._took(i, t.record(info, role, ev, cached=info.sha in found))
