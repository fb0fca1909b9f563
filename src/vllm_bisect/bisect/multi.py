"""One culprit per symptom, and every step of one symptom, layered above the
:class:`~vllm_bisect.bisect.driver.Driver`.

``verdict.symptoms = ["length", "itl"]`` runs one search per symptom over the same range and
the same measurements: every search opens the same session journal and result cache (keyed
by ``BisectSpec.measurement_key``, which leaves the verdict out), so a commit measured for
one symptom is judged for the next one from its stored measurement, and measured again only
when the next symptom's test asks for more (the two-level test goes on from the servers it
has). Noise-aware symptoms search first; a threshold symptom after them (a cap) judges
every commit already measured free, ends its range at the first that shows it, and its
intermittence check counts the servers that already showed it.

After a culprit of a noise-aware symptom (itl, throughput, mtp-speedup: a strategy that
calibrates), the rest checks (``verdict.rest_check``, on by default) ask whether it explains
the whole effect: the bad endpoint against the culprit, and the culprit's parent against the
good endpoint (bisect/rest.py: from the servers the search and the verification ran;
"explained" once even the 95% upper bound of the rest is under the smallest change that
matters, else at most ``verdict.rest_servers`` fresh servers, then "undecided" with the
command that checks further). Whichever side is still clearly worse is bisected the same
way, with its own checks. With
more than one step found, each culprit is tested against its parent alone the same way, and
one that does not separate is reported as not confirmed. Every step is reported ("a 1.30x
itl change at X, and another 1.28x itl change at Y"): result.json ``culprits``, report.md and
the terminal.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from vllm_bisect.bisect import rest
from vllm_bisect.bisect.culprits import Culprit, MultiResult, step_effect
from vllm_bisect.bisect.culprits import headline as _headline
from vllm_bisect.bisect.driver import BisectResult, Driver
from vllm_bisect.bisect.events import EventHandler
from vllm_bisect.bisect.policies import Plan, make_policy, resolve
from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.rest import RestAnswer
from vllm_bisect.errors import NotReproduced, RestExplained, RestUndecided
from vllm_bisect.models import Evaluation, Phase, Verdict
from vllm_bisect.spec import BisectSpec, Symptom
from vllm_bisect.text import plural

logger = logging.getLogger(__name__)
MAX_SEARCHES = 7   # per symptom: the first, and the rest checks (two per culprit found)


# a driver for (the symptom's spec, the range), under the symptom's settled plan
MakeDriver = Callable[[BisectSpec, CommitRange, Plan], Driver]


def capped_servers(ev: Evaluation, floor: int) -> list[bool] | None:
    """Per server of a measurement (merged over several by the two-level test: requests in
    server order, ``two_level_samples`` sizes them): did a request come back short? None
    when there is no measurement or the servers cannot be told apart."""
    m = ev.measurement
    if m is None:
        return None
    groups = ev.samples
    sizes = ([len(g) for g in groups if isinstance(g, list)] if isinstance(groups, list)
             else [len(m.requests)])
    if sum(sizes) != len(m.requests) or not m.requests:
        return None
    out, start = [], 0
    for n in sizes:
        out.append(any(r.output_tokens < floor for r in m.requests[start:start + n]))
        start += n
    return out


class _Loop:
    def __init__(self, spec: BisectSpec, rng: CommitRange, make: MakeDriver,
                 events: EventHandler, plans: dict[Symptom, Plan],
                 spec_path: str = "SPEC") -> None:
        self.spec, self.rng, self.make, self.events = spec, rng, make, events
        self.plans = plans   # each symptom's, settled once (run_symptoms)
        self.spec_path = spec_path
        self.out: MultiResult | None = None
        self.starts = 0
        self.phases: Counter[Phase] = Counter()   # every search's and check's starts
        self.wall = 0.0
        self.rounds = 0

    def search(self, driver: Driver) -> BisectResult:
        """One Driver's search; its server starts are counted even when it refuses."""
        try:
            r = driver.run()
        finally:
            self.starts += driver.measurer.server_starts
            self.phases.update(driver.measurer.by_phase)
        self.wall += r.wall_s
        self.rounds += r.rounds
        if self.out is None:
            self.out = MultiResult(r)
        else:
            self.out.result.probed.extend(r.probed)
            self.out.result.evaluations.update(r.evaluations)
        return r

    def narrowed(self, sp: BisectSpec, plan: Plan, rng: CommitRange) -> CommitRange:
        """A threshold symptom after another symptom's search: its verdict on every commit
        measured so far is free (one measurement decides); the range ends at the first one
        that shows it (a symptom shown is evidence even when it is flaky; one missing is
        not, so the good end stays)."""
        if self.out is None or plan.needs_calibration or plan.models_range:
            return rng
        policy = make_policy(sp, plan.strategy)
        known = self.out.result.evaluations
        good = known.get(rng.good.sha)
        if good is None or good.measurement is None:
            return rng
        # the reference of relative thresholds
        policy.learn(good, Role.GOOD_ENDPOINT, policy.judge(good, Role.GOOD_ENDPOINT))
        for i, c in enumerate(rng.commits[:-1]):
            ev = known.get(c.sha)
            if ev is not None and ev.measurement is not None and policy.judge(
                    ev, Role.BISECT).verdict is Verdict.BAD:
                self.events.on_phase("", f"{sp.verdict.symptom.value}: {c.sha[:12]} already "
                                         "shows it (measured before): the search ends there")
                return CommitRange(good=rng.good, bad=c, commits=rng.commits[:i + 1])
        return rng

    def runs_taken(self, sp: BisectSpec) -> BisectSpec:
        """auto's intermittence check of a cap (the bad end up to ``intermittent_runs`` times
        on fresh servers, to tell a deterministic cap from a flaky one) counts the servers
        this session already ran (another symptom's search) of the commits that showed the
        cap: when every one of those servers showed it, only the rest run (a server of such
        a commit that missed it: nothing is counted, the check runs in full)."""
        v = sp.verdict
        floor = sp.min_output_tokens()
        if (v.symptom is not Symptom.LENGTH or v.strategy != "auto" or self.out is None
                or floor is None):
            return sp
        shown = 0
        for c in self.rng.commits:   # the whole range: the cap is the same change
            ev = self.out.result.evaluations.get(c.sha)
            per_server = capped_servers(ev, floor) if ev is not None else None
            if per_server is None or not any(per_server):
                continue          # not measured, servers not told apart, or no cap shown
            if not all(per_server):
                return sp         # shown on some servers only: flaky, the check runs in full
            shown += len(per_server)
        if shown < 2:
            return sp
        runs = max(1, v.intermittent_runs - shown + 1)  # the bad end's known run counts once
        self.events.on_phase("", f"{v.symptom.value}: shown on "
                                 f"{'the one server' if shown == 1 else f'all {shown} servers'}"
                                 f" that ran commits showing it; "
                                 f"{plural(runs - 1, 'more run')} of the bad end check that "
                                 "it is not intermittent")
        return sp.model_copy(update={"verdict": v.model_copy(
            update={"intermittent_runs": runs})})

    def symptom(self, s: Symptom) -> None:
        """The symptom's search, then the rest checks of each culprit found: the bad end
        against the culprit, and the culprit's parent against the good end (whichever step
        the search found first, the other lies on one side); each check that separates is
        bisected the same way."""
        sp, plan = self.spec.for_symptom(s), self.plans[s]
        rng = self.narrowed(sp, plan, self.rng)
        sp = self.runs_taken(sp)
        todo: list[tuple[CommitRange, int, str]] = [(rng, -1, "")]  # range, by culprit, what
        first = len(self.out.culprits) if self.out is not None else 0
        try:
            self._steps(s, sp, plan, todo)
            self._pair_checks(sp, plan, first)
        finally:
            if self.out is not None:   # the symptom's steps in range order, numbered so
                found = self.out.culprits[first:]
                pos = {c.sha: i for i, c in enumerate(self.rng.commits)}
                found.sort(key=lambda c: pos.get(c.commit or "", len(pos)))
                self.out.culprits[first:] = [replace(c, step=k + 1)
                                             for k, c in enumerate(found)]

    def _pair_checks(self, sp: BisectSpec, plan: Plan, first: int) -> None:
        """With more than one step found: each culprit against its parent alone, with the
        same calibrating test (their servers so far reused); one that does not separate by
        the smallest change that matters is marked unconfirmed (a commit on a plateau
        judged off it by noise)."""
        assert self.out is not None
        found = self.out.culprits[first:]
        if sum(c.commit is not None for c in found) < 2:
            return
        pair_sp = sp.model_copy(update={"verdict": sp.verdict.model_copy(
            update={"verify_samples": 0})})
        for k, c in enumerate(found, start=first):
            if c.commit is None:
                continue
            i = self.rng.index(c.commit)
            pair = CommitRange(good=self.rng.good if i == 0 else self.rng.commits[i - 1],
                               bad=self.rng.commits[i], commits=(self.rng.commits[i],))
            self.events.on_phase("", f"{c.symptom}: {c.commit[:12]} against its parent alone")
            before = self.starts
            try:
                self.search(self.make(pair_sp, pair, plan))
            except NotReproduced as err:
                self.out.culprits[k] = replace(c, confirmed=False)
                self._note(k, f"not confirmed against its parent alone ({self.starts - before}"
                              f" server starts): {err.message}")

    def _steps(self, s: Symptom, sp: BisectSpec, plan: Plan,
               todo: list[tuple[CommitRange, int, str]]) -> None:
        searches = 0
        verified: dict[str, rest.Servers] = {}   # the culprits' verifications' servers
        while todo:
            rng, by, what = todo.pop(0)
            if searches == MAX_SEARCHES:
                self._note(by, f"stopped after {MAX_SEARCHES} searches")
                return
            searches += 1
            before = self.starts
            driver = self.make(sp, rng, plan)
            driver.rest = by >= 0
            if by >= 0:
                self.events.on_phase("", f"rest check ({s.value}): is {what}?")
                if not self._worse(driver, sp, by, what, verified):
                    continue
            try:
                r = self.search(driver)
                verified.update(rest.verified_servers(r.verification, s))
            except NotReproduced as err:
                if by < 0:
                    raise
                # the numbers, not every server's level: one short line a check
                answer = ("undecided" if isinstance(err, RestUndecided) else
                          "no, the culprit explains the effect" if isinstance(err, RestExplained)
                          else "no")
                self._note(by, f"rest check, {what}: {answer} "
                               f"({rest.starts_text(self.starts - before)}): "
                               f"{err.message.split('; ')[0]}")
                continue
            assert self.out is not None
            subjects = {c.sha: c.subject for c in rng.commits}
            c = Culprit(symptom=s.value, step=searches, commit=r.first_bad,
                        subject=subjects.get(r.first_bad or "", ""), good=rng.good.sha,
                        bad=rng.bad.sha, effect=step_effect(r, self.out.result.evaluations, s),
                        server_starts=self.starts - before, candidates=tuple(r.candidates))
            if by >= 0:
                self._note(by, f"rest check, {what}: yes, bisected")
            self.out.culprits.append(c)
            self.events.on_phase("", f"{s.value}: {c.describe()}")
            if r.first_bad is None or not plan.checks_rest:
                continue
            me = len(self.out.culprits) - 1
            sha = r.first_bad[:12]
            left, right = rng.before(r.first_bad), rng.after(r.first_bad)
            if right is not None:
                todo.append((right, me, f"the bad end {rng.bad.sha[:12]} still clearly worse "
                                        f"than {sha}"))
            if left is not None:
                todo.append((left, me, f"{sha}'s parent clearly worse than the good end "
                                       f"{rng.good.sha[:12]}"))

    def _worse(self, driver: Driver, sp: BisectSpec, by: int, what: str,
               verified: dict[str, rest.Servers]) -> bool:
        """The rest check (bisect/rest.py) from the servers so far, at most
        ``verdict.rest_servers`` more: True when the part is clearly worse (bisect it, on
        ``driver``), else the answer is noted and nothing more runs. Not the two-level test:
        True (the search's own calibration answers)."""
        rng, cap = driver.rng, sp.verdict.rest_servers
        try:
            with driver.measurer.during(Phase.REST):
                found = rest.check(driver.core.policy, driver.tester.runs, cap, verified)
        except NotReproduced as err:   # an end that could not be tested
            found, why = None, err.message
        else:
            if found is None or found.answer is RestAnswer.WORSE:
                return True   # the search on this driver counts its starts
            why = found.reason
        starts = driver.measurer.server_starts
        self.starts += starts
        self.phases.update(driver.measurer.by_phase)
        self._note(by, rest.note(what, found, why, starts, cap, rng, self.spec_path))
        return False

    def _note(self, index: int, text: str) -> None:
        """A culprit's note (the rest checks' conclusions)."""
        assert self.out is not None and self.out.culprits
        logger.info("%s", text)
        self.events.on_phase("", text)
        c = self.out.culprits[index]
        # one line a check (a note holds one per line)
        self.out.culprits[index] = replace(c, note=f"{c.note}\n{text}" if c.note else text)


def run_symptoms(spec: BisectSpec, rng: CommitRange, make: MakeDriver,
                 events: EventHandler, spec_path: str = "SPEC", workers: int = 1) -> MultiResult:
    """Every symptom of ``spec.symptom_list()``, each with its rest checks. A symptom that
    does not reproduce is a note when another one did (else the error stands). Each symptom's
    verdict plan is settled here, once (:func:`~vllm_bisect.bisect.policies.resolve`), and
    passed to every driver of it (``make``). ``spec_path``: the session's spec file, for the
    commands the notes give; ``workers``: the executor's (the plan's reason names them)."""
    plans = {s: resolve(spec.for_symptom(s), workers=workers) for s in spec.symptom_list()}
    loop = _Loop(spec, rng, make, events, plans, spec_path)
    refused: list[tuple[Symptom, NotReproduced]] = []
    # noise-aware symptoms first: a threshold symptom then judges their measurements free
    for s in sorted(spec.symptom_list(), key=lambda x: not plans[x].checks_rest):
        try:
            loop.symptom(s)
        except NotReproduced as err:
            refused.append((s, err))
    if loop.out is None:
        raise refused[0][1]
    for s, why in refused:
        loop.out.culprits.append(Culprit(
            symptom=s.value, step=1, commit=None, subject="", good=rng.good.sha,
            bad=rng.bad.sha, effect=None, server_starts=0,
            note=f"did not reproduce: {why.message}"))
    loop.out.result = replace(_headline(loop.out), server_starts=loop.starts, wall_s=loop.wall,
                              rounds=loop.rounds,
                              starts_by_phase={p.value: k for p, k in loop.phases.items()})
    return loop.out
