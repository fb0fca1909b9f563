"""The search of ``verdict.strategy = "changepoint"``: one model of the whole range, fed by
every server.

Every server this session measured (the endpoints', the search's, an earlier call's: the
journal holds one record per server, written when that server is done) goes into one
posterior over the first bad commit (:mod:`vllm_bisect.verdict.changepoint`). The ends get
one server each first; then, until one commit holds ``verdict.confidence`` of the
posterior, the next server goes where the model is in doubt
(:mod:`vllm_bisect.verdict.changepoint_next`): another server at a commit whose side is
unsure, else a new commit at the posterior's median. Each server runs the requests the
learned spreads make cheapest (``requests_per_server``). No confirmation or verification
phase: a final pair short of evidence gets more servers because P is below the bar. A
posterior that says "no step that matters" or "a drift, not a step" with ``confidence``
refuses (``NotReproduced``) with its numbers.
"""

from __future__ import annotations

import logging
import math
from collections import Counter

import numpy as np

from vllm_bisect.bisect.policies.base import MoreSamples, Role
from vllm_bisect.bisect.policies.changepoint import ChangePointPolicy
from vllm_bisect.bisect.search.binary import Found
from vllm_bisect.bisect.search.changepoint_prior import END_REQUESTS, least_requests, model_prior
from vllm_bisect.bisect.search.endpoints import untestable_end
from vllm_bisect.bisect.search.range_model import RangeModel, servers_of, summary
from vllm_bisect.bisect.search.steps import Step
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.errors import NotReproduced, RestExplained, RestUndecided, SpecError
from vllm_bisect.models import EvalStatus, Evaluation, Measurement, Outcome, Phase, Verdict
from vllm_bisect.probes.decode import combine
from vllm_bisect.spec import SearchKind
from vllm_bisect.text import plural
from vllm_bisect.verdict.auto import samples_of
from vllm_bisect.verdict.changepoint import (
    Posterior,
    Server,
    posterior,
    requests_for_step,
    requests_per_server,
    summarise,
)
from vllm_bisect.verdict.changepoint_next import choose, doubt, lone_end_in_doubt
from vllm_bisect.verdict.changepoint_rate import RATE_SYMPTOMS, rate_posterior

logger = logging.getLogger(__name__)
REST_EXPLAINED, REST_BISECT = 0.2, 0.5   # a rest check's lines (changepoint_prior.REST_PRIOR)
DRIFT_POINTS = 6      # commits inside the range measured before a drift can be the answer
SURE = 1e-3           # a server inside the range stops its requests once its side is this sure
GIVE_UP = 2           # a commit whose servers failed this many times is skipped


class ChangePointSearch:
    """``rest``: a rest check's search (see ``REST_PRIOR``)."""

    def __init__(self, tester: Tester, rest: bool = False) -> None:
        self.t = tester
        self.rest = rest
        spec = tester.store.spec
        self.v = spec.verdict
        self.symptom = self.v.symptom
        self.n = len(tester.rng.commits)
        rng = tester.rng
        self.index = {rng.good.sha: -1, **{c.sha: i for i, c in enumerate(rng.commits)}}
        self.roles = {info.sha: role for info, role in tester.terms.endpoints(rng)}
        self.prior = model_prior(self.v, tester.terms.search, rest)
        # a symptom a server shows or not: one bit a server (verdict/changepoint_rate.py)
        self.rate = self.symptom in RATE_SYMPTOMS
        if self.rate and tester.terms.search is SearchKind.FIX:
            raise SpecError(f"verdict.strategy = \"changepoint\" on {self.symptom.value} "
                            "searches regressions only", hint="use strategy = \"threshold\"")
        self.least = least_requests(self.prior, spec.probe.requests)
        self.servers: list[Server] = []
        self.skipped: set[int] = set()
        self.failures: Counter[int] = Counter()
        self.measured = 0          # servers this call started
        self.rounds = 0            # rounds of servers at once (one worker: one a round)
        self.startups: list[float] = []    # seconds to healthy, per server measured
        self.by_commit: dict[int, list[Measurement]] = {}   # each commit's measured servers
        self.request_s: list[float] = []   # seconds per probe request
        self.model: RangeModel | None = None
        self._last: tuple[tuple[Server, ...], Posterior] | None = None
        policy = tester.policy
        if not isinstance(policy, ChangePointPolicy):
            raise TypeError("the change-point search needs the changepoint policy")
        self.policy = policy
        policy.side = self._side
        self._from_journal()

    # -- the data ------------------------------------------------------------------------
    def _from_journal(self) -> None:
        """Every server this session recorded for a commit of the range (a resumed session,
        another symptom's search, the search before a rest check)."""
        keys = {self.t.store.key(sha): i for sha, i in self.index.items()}
        for key, ev in self.t.store.journal.evaluation_history():
            if key in keys:
                self._add(keys[key], ev)

    def _add(self, i: int, ev: Evaluation) -> None:
        if ev.startup_s:
            self.startups.append(ev.startup_s)
        if ev.measurement is not None:
            self.request_s += [r.latency_ms / 1000 for r in ev.measurement.requests
                               if r.latency_ms > 0]
            found = self._servers(ev, i)
            if found:
                self.servers.extend(found)
                return
        if ev.status is EvalStatus.UNAVAILABLE:
            self.skipped.add(i)
        elif ev.status is not EvalStatus.CANCELLED:
            self.failures[i] += 1
            if self.failures[i] >= GIVE_UP:
                self.skipped.add(i)

    def _merged(self, i: int, ev: Evaluation) -> Evaluation:
        """The commit's evaluation over every server this call measured of it (the report's
        row, and what another symptom's search judges next): the requests of all of them, and
        each server's samples (natural scale, as the two-level policy keeps them: the result
        cache is shared) in ``samples``."""
        assert ev.measurement is not None
        ms = self.by_commit.setdefault(i, [])
        ms.append(ev.measurement)
        if len(ms) == 1:
            return ev
        whole = ms[0]
        for m in ms[1:]:
            whole = combine(whole, m)
        groups = [[x for x in samples_of(m, self.symptom) if x > 0] for m in ms]
        return ev.model_copy(update={"measurement": whole, "samples": groups})

    def _side(self, ev: Evaluation) -> Outcome:
        """The model's verdict on a measured server (pure): its commit's side with it."""
        i = self.index.get(ev.commit)
        new = self._servers(ev, i) if i is not None else []
        if i is None or not new:
            return Outcome(commit=ev.commit, verdict=Verdict.SKIP,
                           reason=f"no {self.symptom.value} samples in the measurement",
                           measurement=ev.measurement)
        servers = [*self.servers, *new]
        on = self.servers_at(i) + len(new)
        if not {-1, self.n - 1} <= {s.index for s in servers}:   # the model starts from both
            return Outcome(commit=ev.commit, measurement=ev.measurement,
                           verdict=Verdict.GOOD if i == -1 else Verdict.BAD,
                           reason="an end of the range (the model starts once both are "
                                  "measured)")
        post = self._posterior(servers)
        if i in (-1, self.n - 1):
            verdict = Verdict.GOOD if i == -1 else Verdict.BAD
            why = f"P(no step that matters) = {post.none:.3g}"
        else:
            p = post.p_bad(i)
            verdict = Verdict.BAD if p >= 0.5 else Verdict.GOOD
            why = f"P(new side) = {p:.3g}"
        return Outcome(commit=ev.commit, verdict=verdict, measurement=ev.measurement,
                       reason=f"model of the range: {why} with this server ({on} of this "
                              f"commit, {len(self.servers) + len(new)} in all)")

    def _posterior(self, servers: list[Server]) -> Posterior:
        """The posterior over ``servers``; the one a recorded server's verdict computed is the
        next step's too (the search then holds the same servers): computed once."""
        key = tuple(servers)
        if self._last is None or self._last[0] != key:
            self._last = (key, rate_posterior(self.n, servers) if self.rate
                          else posterior(self.n, servers, self.prior))
        return self._last[1]

    def _servers(self, ev: Evaluation, i: int) -> list[Server]:
        """A server's data: its samples, or one bit (a rate symptom: shown by the server, as
        the thresholds judge it; a skip is no data)."""
        if not self.rate:
            return servers_of(ev, i, self.symptom)
        verdict = self.policy.thresholds_policy.judge(ev, Role.BISECT).verdict
        shown = {Verdict.BAD: 1.0, Verdict.GOOD: 0.0}.get(verdict)
        return [] if shown is None else [Server(i, 1, shown, 0.0)]

    def per_commit_limit(self) -> int:
        """Servers a commit may get: ``verdict.max_servers``, twice that for a symptom a
        server shows or not (a flaky cap at q = 0.5 needs ~8 clean servers for a commit's side
        alone: 12 -> 24 took that row from 85% to 96.7% exact at the same mean cost)."""
        return self.v.max_servers * (2 if self.rate else 1)

    def servers_at(self, i: int) -> int:
        return sum(s.index == i for s in self.servers)

    # -- measuring -----------------------------------------------------------------------
    def _more(self, requests: int, adaptive: bool = False,
              at: int | None = None) -> MoreSamples | None:
        """How many more requests a server runs: up to ``requests``; ``adaptive`` (an end's
        first server, before any model): as many as its own spread needs
        (``requests_for_step``); ``at``: a commit inside the range, whose server stops early
        once the model with its requests so far is sure of the commit's side."""
        if not self.prior.per_request:
            return None
        symptom, prior, most = self.symptom, self.prior, self.v.max_samples

        def more(m: Measurement) -> int:
            xs = samples_of(m, symptom)
            want = (requests_for_step(xs, prior.min_step, requests, most) if adaptive
                    else requests)
            if at is not None and self.least <= len(xs) < want and self._sure(at, xs):
                return 0
            return max(0, want - len(xs))
        return more

    def _sure(self, at: int, samples: list[float]) -> bool:
        """Would the model, with this server's requests so far, doubt commit ``at``'s side
        less than ``SURE`` (more requests there would not change where the search goes)?"""
        if self.rate:
            return False
        s = summarise(at, samples)
        if s is None:
            return False
        return doubt(posterior(self.n, [*self.servers, s], self.prior), at) <= SURE

    def _measure(self, i: int, requests: int, adaptive: bool = False) -> None:
        t = self.t
        info = t.rng.good if i == -1 else t.rng.commits[i]
        role = self.roles.get(info.sha, Role.BISECT)
        # the first server of a commit may come from the result cache; later ones are fresh
        first = self.servers_at(i) == 0 and self.failures[i] == 0
        self.policy.more = self._more(requests, adaptive,
                                      at=i if 0 <= i < self.n - 1 else None)
        phase = (Phase.REST if self.rest else Phase.ENDPOINTS if role is not Role.BISECT
                 else Phase.SEARCH)
        with t.measurer.during(phase):
            left = self._last[1].steps_left() if self._last is not None else 0
            outcome = t.test(info, role, left, fresh=not first)
        self.rounds += 0 if outcome.from_cache else 1
        self._took(i, outcome)

    def _took(self, i: int, outcome: Outcome) -> None:
        """A recorded server of commit ``i`` goes into the model (an end that cannot be
        measured ends the search)."""
        t = self.t
        info = t.rng.good if i == -1 else t.rng.commits[i]
        self.measured += 0 if outcome.from_cache else 1
        ev = t.evaluations[info.sha]
        self._add(i, ev)
        if ev.measurement is not None:
            t.evaluations[info.sha] = self._merged(i, ev)
        if i in (-1, self.n - 1) and i in self.skipped:
            name = t.terms.old if i == -1 else t.terms.new
            raise untestable_end(name, info.sha, outcome.reason, log=ev.log,
                                 network=ev.network, transient=ev.transient, advice=ev.hint)

    # -- the search ----------------------------------------------------------------------
    def run(self) -> Found:
        v = self.v
        self.measure_ends_first()
        while True:
            post = self._posterior(self.servers)
            j, p = post.top()
            if self.n == 1:   # one commit: a drift over it is its step (nothing tells them
                p += post.drift   # apart; P(drift) stayed at ~0.03 for 20 servers)
            self.model = summary(post, p)
            lo, hi = post.bounds[j], post.bounds[j + 1]
            inside = [c for c in range(lo + 1, hi) if c not in self.skipped]
            if p >= v.confidence and (hi - lo == 1 or not inside):
                logger.info("model of the range: P = %.4f on (%d, %d] after %d servers",
                            p, lo, hi, len(self.servers))
                step = (Step(culprit=hi, candidates=(hi,)) if hi - lo == 1
                        else Step(candidates=tuple(range(lo + 1, hi + 1))))
                return Found(step, self.rounds, p)
            self._refuse_if_settled(post)
            change = 1.0 - post.none     # a step or a drift that matters
            if self.rest and change < REST_BISECT:
                what = (f"P(another {self.symptom.value} change of "
                        f"{math.exp(self.prior.min_step):.3g}x or more here) = {change:.3f} "
                        f"from {len(self.servers)} servers")
                lone = (lone_end_in_doubt(post, self.servers, self.prior, REST_BISECT)
                        if change < REST_EXPLAINED and not self.rate else None)
                if change < REST_EXPLAINED and lone is None:
                    raise RestExplained(what)
                if self.measured >= v.rest_servers:
                    raise RestUndecided(f"{what}, after verdict.rest_servers = "
                                        f"{v.rest_servers} more")
                self._measure_ends(post, lone)
                continue
            self.t.events.on_phase("", self._progress(post, j, p))
            if len(self.servers) >= v.max_runs:
                return self._credible(post, p, f"verdict.max_runs = {v.max_runs} reached")
            cost = self.server_cost()
            requests = requests_per_server(post, cost, self.least, v.max_samples)
            usable = [c for c in range(self.n) if c not in self.skipped]
            if not self._next(post, usable, requests):
                return self._credible(post, p, "no measurable commit would tell more")

    def _next(self, post: Posterior, usable: list[int], requests: int) -> bool:
        """The next server (False: no measurable commit would tell more); on k workers,
        the next round (bisect/search/changepoint_parallel.py)."""
        nxt = choose(post, usable, requests, self.v.confidence,
                     per_commit_limit=self.per_commit_limit())
        if nxt is None:
            return False
        self._measure(nxt.index, nxt.requests)
        return True

    def measure_ends_first(self) -> None:
        """A server on each end of the range (the model starts from both), as many requests
        as its own spread needs."""
        for end in (-1, self.n - 1):
            while self.servers_at(end) == 0:
                self._measure(end, max(END_REQUESTS, self.least), adaptive=True)

    def server_cost(self) -> float:
        """A server start's cost in probe requests: measured in this run (the median time to
        healthy over the median request) once three of each are known, else
        ``verdict.server_cost``."""
        if len(self.startups) >= 3 and len(self.request_s) >= 3:
            per = float(np.median(self.request_s))
            if per > 0:
                return max(1.0, float(np.median(self.startups)) / per)
        return self.v.server_cost

    def _measure_ends(self, post: Posterior, end: int | None = None) -> None:
        """A rest check in doubt: another server at ``end``, else at the end with fewer."""
        if end is None:
            end = min((-1, self.n - 1), key=lambda e: (self.servers_at(e), e))
        requests = requests_per_server(post, self.server_cost(), self.least,
                                       self.v.max_samples)
        self._measure(end, max(requests, END_REQUESTS))

    def _progress(self, post: Posterior, j: int, p: float) -> str:
        rng = self.t.rng
        lo, hi = post.bounds[j], post.bounds[j + 1]
        after = (rng.good if lo < 0 else rng.commits[lo]).sha[:12]
        name = (rng.commits[hi].sha[:12] if hi - lo == 1
                else f"{plural(hi - lo, 'commit')} after {after}")
        return (f"model of the range: P(first bad is {name}) = {p:.3f}, P(no step) = "
                f"{post.none:.3f}, {plural(len(self.servers), 'server')}")

    def _credible(self, post: Posterior, p: float, why: str) -> Found:
        pk = post.per_commit()
        order = np.argsort(-pk, kind="stable")
        out, acc = [], 0.0
        for k in order:
            out.append(int(k))
            acc += float(pk[k])
            if acc >= self.v.confidence * post.step:
                break
        logger.info("model of the range stopped (%s): %d candidates", why, len(out))
        self.t.events.on_phase("", f"model of the range stopped ({why}): {len(out)} "
                                   f"candidates hold {acc:.3f}")
        return Found(Step(candidates=tuple(sorted(out))), self.rounds, p)

    def _refuse_if_settled(self, post: Posterior) -> None:
        """Refuse once "no step" or "a drift" together hold ``confidence``: as "no step"
        (each end measured at least twice) when it is the likelier, else as a drift, only after
        ``DRIFT_POINTS`` commits inside the range were measured (three points on a line are
        also two steps with a plateau between)."""
        conf = self.v.confidence
        inside = len({s.index for s in self.servers} - {-1, self.n - 1})
        twice = min(self.servers_at(-1), self.servers_at(self.n - 1)) >= 2
        # "no step" and "a drift" both mean no commit to name: together they can hold
        # `confidence` while neither does alone (a drift of nearly no slope is "no step" too,
        # and the data tell them apart only slowly: 126 servers once, P(none) 0.986)
        settled = post.none + post.drift >= conf
        drift = post.drift > post.none
        if not settled or (drift and inside < DRIFT_POINTS) or (not drift and not twice):
            return
        ends = {e: [s.mean for s in self.servers if s.index == e] for e in (-1, self.n - 1)}
        old, new = (math.exp(sum(x) / len(x)) for x in ends.values())
        smallest = math.exp(self.prior.min_step)
        seen = (f"old end {old:.4g}, new end {new:.4g} ({self.symptom.value}, geometric mean "
                f"over {len(ends[-1])} and {len(ends[self.n - 1])} servers; "
                f"{len(self.servers)} servers in all)")
        if self.rate:
            seen = "; ".join(f"{name} end: {self.symptom.value} on {sum(x):g} of {len(x)} "
                             f"servers" for name, x in zip(("old", "new"), ends.values(),
                                                           strict=True))
        if drift:
            raise NotReproduced(f"no single culprit: the {self.symptom.value} change is "
                                f"gradual over the range (P(a drift, no step) = "
                                f"{post.drift:.3f}): {seen}",
                                hint="bisect a shorter range, or compare two commits with "
                                     "`vllm-bisect compare`")
        what = "change" if self.rate else f"step of {smallest:.3g}x or more"
        raise NotReproduced(f"did not reproduce: P(no {self.symptom.value} {what}) = "
                            f"{post.none + post.drift:.3f}: {seen}",
                            hint="check the range, or lower verdict.min_effect / the "
                                 "symptom's factor if a smaller change matters")
