"""The change-point search on k workers (``verdict.strategy = "changepoint"``,
``parallel.workers = k > 1``): the same model of the range, measured a round at a time.

Each round picks up to k measurements from one posterior
(:func:`~vllm_bisect.verdict.changepoint_batch.choose_batch`: the commits in doubt, then
the posterior's equal-probability quantiles) and runs them at once on the measurer's
workers, one fresh server each (a commit's first may come from the result cache, as on one
worker); then records them in the order chosen, each server into the model as it is
recorded (its verdict is the model's with the servers recorded before it), and the next
round starts from the new posterior. The range's ends are the first round (both at once);
with k > 2 workers the others start on the flat prior's (k - 1)-section of the range beside
them (multisection's speculative start), recorded once both ends are in the model (a rest
check measures its ends alone: it mostly ends there).
Everything else (the stop rule, the refusals, the rest checks' rule and their ends, the
skips, ``verdict.max_runs``) is :class:`~vllm_bisect.bisect.search.changepoint.ChangePointSearch`'s;
``rounds`` counts rounds, ``measured`` servers. Rounds are synchronous: a round waits for
its slowest server (the multisection's work-conserving dispatch is not done here).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from vllm_bisect.bisect.policies.base import MoreSamples, Role
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.bisect.search.changepoint import ChangePointSearch
from vllm_bisect.bisect.search.changepoint_prior import END_REQUESTS
from vllm_bisect.bisect.tester import phase_of
from vllm_bisect.models import Evaluation, Phase
from vllm_bisect.verdict.changepoint import Posterior
from vllm_bisect.verdict.changepoint_batch import choose_batch

logger = logging.getLogger(__name__)

Pick = tuple[int, int, bool]   # (commit index, requests, adaptive: an end's first server)
Held = tuple[int, Evaluation, bool]   # (commit index, its evaluation, from the cache)


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
        (again, the one whose server failed); beside them, on a fresh search with k > 2,
        the interior commits that split the range evenly (``_beside``; as many requests as
        each one's spread needs too: there is no model yet)."""
        ends = [e for e in (-1, self.n - 1) if self.servers_at(e) == 0]
        if not ends:
            return
        request = max(END_REQUESTS, self.least)
        held = self._run_round([(c, request, True) for c in [*ends, *self._beside(len(ends))]])
        self._record(held[:len(ends)])
        later = held[len(ends):]
        ends = [e for e in ends if self.servers_at(e) == 0]
        while ends:
            self.measure_round([(e, request, True) for e in ends])
            ends = [e for e in ends if self.servers_at(e) == 0]
        self._record(later)

    def _beside(self, ends: int) -> list[int]:
        """The interior commits a fresh search measures beside both ends: the ``k - 2``
        that split a flat prior into ``k - 1`` equal parts (usable, distinct)."""
        m = self.t.measurer.workers - 2
        if ends < 2 or m <= 0 or self.rest or self.servers or self.n < 3:
            return []
        usable = [c for c in range(self.n - 1) if c not in self.skipped]
        out: list[int] = []
        for j in range(1, m + 1):
            target = j * self.n / (m + 1) - 1     # P(first bad <= c) = (c + 1) / n
            left = [c for c in usable if c not in out]
            if left:
                out.append(min(left, key=lambda c: (abs(c - target), c)))
        return sorted(out)

    def measure_round(self, picks: Sequence[Pick]) -> None:
        """One server for each pick (distinct commits), at once on free workers, recorded
        and added to the model in the order given."""
        if len(picks) == 1:   # (the one-worker path, the same servers)
            self._measure(*picks[0])
            return
        self._record(self._run_round(picks))

    def _run_round(self, picks: Sequence[Pick]) -> list[Held]:
        """Each pick's evaluation (known, or measured at once on free workers), not yet
        recorded, in the order given."""
        t = self.t
        assert len({i for i, _, _ in picks}) == len(picks), picks   # (one server a commit)
        logger.info("model of the range: a round of %d servers at once: %s", len(picks),
                    ", ".join(str(i) for i, _, _ in picks))
        left = self._last[1].steps_left() if self._last is not None else 0
        found: dict[str, Evaluation] = {}
        missing: dict[str, MoreSamples | None] = {}
        phases: dict[str, Phase] = {}
        for i, requests, adaptive in picks:
            info = self._info(i)
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
        return [(i, found.get(sha) or measured[sha], sha in found)
                for i, sha in ((i, self._info(i).sha) for i, _, _ in picks)]

    def _record(self, held: Sequence[Held]) -> None:
        """Record each evaluation (the model's verdict with the servers before it) and add
        its server to the model, in order."""
        for i, ev, cached in held:
            info = self._info(i)
            role = self.roles.get(info.sha, Role.BISECT)
            self._took(i, self.t.record(info, role, ev, cached=cached))

    def _info(self, i: int) -> CommitInfo:
        return self.t.rng.good if i == -1 else self.t.rng.commits[i]
