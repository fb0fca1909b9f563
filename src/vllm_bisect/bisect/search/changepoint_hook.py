"""``git bisect run vllm-bisect hook`` under ``verdict.strategy = "changepoint"``: HEAD's side
from the same model of the range ``vllm-bisect run`` keeps.

Each hook call is a process of its own; the model is rebuilt from the bisect's journal (every
server of every earlier call, git's ends included: :class:`ChangePointSearch` reads them).
git's ends get one server each on the first call (as ``run`` measures its ends first). Then,
until the model is sure which side of the step HEAD is on, one more server goes where it
settles that best (HEAD itself, or, once HEAD has as many servers as the weaker side, that
side's sure commit nearest the boundary: the same rule as ``run``'s chooser), or to an end
while "no step" is still credible. HEAD is answered when P(its side) reaches a bar that
spends ``verdict.confidence``'s error over the answers git will ask for (about log2 of the
range), so the whole bisect keeps roughly ``run``'s confidence; a range whose model says "no
step that matters" (or a drift) with ``confidence`` stops the bisect, as ``run`` refuses it.
An answer also needs P(a step) >= ``confidence`` (``run`` names a culprit on the same
terms): while its side is sure but the step is not, the ends get another server ("no step"
still credible) or the widest unmeasured stretch of the range does (a drift). A HEAD still
in doubt after ``verdict.max_servers`` servers of its own (twice that for a cap) is a skip.
"""

from __future__ import annotations

import itertools
import logging
import math

from vllm_bisect.bisect.search.changepoint import ChangePointSearch
from vllm_bisect.models import Measurement, Outcome, Verdict
from vllm_bisect.text import plural
from vllm_bisect.verdict.changepoint import Posterior, requests_per_server
from vllm_bisect.verdict.changepoint_next import NONE_DOUBT, anchor

logger = logging.getLogger(__name__)


def answer_bar(confidence: float, n: int) -> float:
    """P(HEAD's side) an answer needs: ``confidence``'s error shared by the ~log2(n + 1)
    answers git asks for in a range of ``n`` commits."""
    answers = max(1, math.ceil(math.log2(n + 1)))
    return 1.0 - (1.0 - confidence) / answers


class HookSearch(ChangePointSearch):
    """The change-point search asked about one commit at a time (git chooses which)."""

    def judge(self, sha: str) -> Outcome:
        """HEAD's verdict from the model (measuring until it is sure, see the module doc)."""
        i = self.index.get(sha)
        if i is None or i in (-1, self.n - 1):
            return Outcome(commit=sha, verdict=Verdict.SKIP,
                           reason="not inside git bisect's range (the model of the range "
                                  "judges the commits between its good and bad ends)")
        self.measure_ends_first()
        bar = answer_bar(self.v.confidence, self.n)
        while True:
            if i in self.skipped:   # (no artifact, or its servers failed GIVE_UP times)
                ev = self.t.evaluations.get(sha)
                return Outcome(commit=sha, verdict=Verdict.SKIP,
                               measurement=self._measurement(sha),
                               reason=ev.reason if ev is not None and ev.reason
                               else "this commit could not be measured")
            post = self._posterior(self.servers)
            self._refuse_if_settled(post)
            p = post.p_bad(i)
            step = 1.0 - post.none - post.drift
            sure = max(p, 1.0 - p)
            if sure >= bar and step >= self.v.confidence and self.servers_at(i) > 0:
                return self._outcome(sha, i, post, p, bar)
            if self.servers_at(i) >= self.per_commit_limit() or len(self.servers) >= self.v.max_runs:
                return Outcome(commit=sha, verdict=Verdict.SKIP,
                               measurement=self._measurement(sha),
                               reason=f"the model of the range is unsure of this commit's "
                                      f"side: P(new side) = {p:.3f}, P(a step) = {step:.3f} "
                                      f"after {plural(self.servers_at(i), 'server')} of it and "
                                      f"{len(self.servers)} in all (at most "
                                      f"{self.per_commit_limit()} a commit, verdict.max_runs = "
                                      f"{self.v.max_runs})")
            self.t.events.on_phase("", f"model of the range: P({sha[:12]} on the new side) = "
                                       f"{p:.3f}, P(a step) = {step:.3f}, "
                                       f"{len(self.servers)} servers")
            requests = requests_per_server(post, self.server_cost(), self.least,
                                           self.v.max_samples)
            usable = {c for c in range(-1, self.n) if c not in self.skipped}
            if self.servers_at(i) == 0:
                self._measure(i, requests)
            elif post.none + post.drift > NONE_DOUBT or sure >= bar:   # is there a step?
                if post.drift > post.none:      # a drift or a step: levels across the range
                    self._measure(self._widest_gap(usable), requests)
                else:                           # a step or none: the ends tell
                    self._measure_ends(post)
            else:
                self._measure(anchor(post, i, usable), requests)

    def _widest_gap(self, usable: set[int]) -> int:
        """The usable commit in the middle of the widest stretch with no server (a drift
        shows as levels that change across the range; a step as two flat sides)."""
        marks = sorted({s.index for s in self.servers} | {-1, self.n - 1})
        gaps = sorted(((b - a, a, b) for a, b in itertools.pairwise(marks) if b - a > 1),
                      reverse=True)
        for _, a, b in gaps:
            inside = [c for c in range(a + 1, b) if c in usable]
            if inside:
                return min(inside, key=lambda c: abs(c - (a + b) / 2))
        return min((-1, self.n - 1), key=self.servers_at)

    def _measurement(self, sha: str) -> Measurement | None:
        ev = self.t.evaluations.get(sha)
        return ev.measurement if ev is not None else None

    def _outcome(self, sha: str, i: int, post: Posterior, p: float, bar: float) -> Outcome:
        new = p >= 0.5
        logger.info("hook: %s on the %s side, P = %.4f (bar %.4f), %d servers", sha[:12],
                    "new" if new else "old", max(p, 1 - p), bar, len(self.servers))
        return Outcome(commit=sha, verdict=Verdict.BAD if new else Verdict.GOOD,
                       measurement=self._measurement(sha),
                       reason=f"model of the range: P(new side) = {p:.4f} (an answer needs "
                              f"{bar:.4f} either way), {plural(self.servers_at(i), 'server')} "
                              f"of this commit, {len(self.servers)} in all")
