"""The verdict policy seam: how an evaluation becomes GOOD / BAD / SKIP, the same for every
way into the core (``vllm-bisect run``, the ``git bisect run`` hook, culprit verification).

A policy is built once per bisect (:func:`vllm_bisect.bisect.policies.make_policy`) and
asked three things:

1. ``calibrate(endpoints, tests)`` before the search, when ``traits.needs_calibration`` is set:
   measure both endpoints (through the ``endpoints`` callback, which may be asked again
   with more samples) and learn from them, or raise ``NotReproduced``.
2. ``open(commit, role)`` just before a commit is measured: a :class:`CommitTrial`, the
   commit under test. It holds the commit's state (the test it samples under, a snapshot
   of what the policy knew when it started; its servers so far); cancelling the commit's
   runs drops the object. The trial says what the first server probes (``more``: how many
   more requests on the same server; None: the probe's first batch is enough), whether a
   known (cached) evaluation is ``final`` (else it is measured again, going on from its
   servers where the trial can: ``resume``), after each server whether to measure it once
   more on a fresh server (``next_probe``: an :class:`Again`, or None when decided), the
   evaluation to judge and cache (``evaluation``: merged over its servers), and its
   ``verdict``.
3. ``judge(evaluation, role)``: a verdict outside any trial (an endpoint recorded by the
   calibration, the hook's replay, a known measurement checked again). The crash rule
   lives here: following ``symptom = "crash"``, a server that died or a probe that failed
   is BAD; otherwise an evaluation without a measurement is a SKIP. Judging is pure (a
   trial's ``verdict`` too): it changes nothing in the policy.
4. ``learn(evaluation, role, outcome)``: what the policy learns from a verdict the Tester
   records (``Tester.record``, the one place a commit is judged and learned from): the
   reference of relative thresholds from the healthy endpoint, a bisect step's samples
   sharpening a learning policy's model (and, for the two-level test, its fall-back).

``Role`` says why a commit is judged: the healthy endpoint's measurement (the good end; in
a fix search the fixed end, ``Terms.reference_role``) is also the reference of relative
thresholds (``itl_factor``, correctness, throughput); a bisect step's samples may sharpen a
learning policy; a verification is judged without learning. Verdicts are in the search's
old/new terms: GOOD = like the old end, BAD = like the new end (a fix search inverts the
symptom's verdict, in ``bisect.terms``, one place).

The two-level test's calibration runs servers itself, through the :class:`ServerRuns`
callback (the Tester).

To add a policy (a two-level noise test, inverted terms for find-the-fix, patch
isolation): implement this Protocol, declare the class's :class:`Traits` (``TRAITS``, and a
``traits_for(spec)`` classmethod: :func:`~vllm_bisect.bisect.policies.resolve` reads them
without building a policy) and register it in ``policies.POLICIES``; nothing else in the
core changes. ``traits.supports_hook`` says whether it can judge one commit at a
time under git's control (``git bisect run``); the hook refuses the ones that cannot. Each
hook call is a process of its own: the policy's model does not outlive it, so the hook
replays the commits it judged before (``Tester.replay``: judged and learned from, in order)
so that a learning policy is in the state ``run`` would be in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from vllm_bisect.bisect.terms import Role as Role  # (its home is bisect.terms)
from vllm_bisect.models import Evaluation, Measurement, Outcome

MoreSamples = Callable[[Measurement], int]  # how many more requests to probe (0: enough)


# measure both endpoints, each with at least the requests ``more`` asks for:
# (good evaluation, bad evaluation)
EndpointMeasure = Callable[[MoreSamples | None], tuple[Evaluation, Evaluation]]


@dataclass(frozen=True)
class Again:
    """Measure the commit again on a fresh server, probing while ``more`` asks."""

    more: MoreSamples | None


class ServerRuns(Protocol):
    """What a calibrating policy may run (served over the Tester by
    :class:`~vllm_bisect.bisect.tester.CalibrationRuns`): fresh servers, the known
    measurements, and recording a judged endpoint."""

    @property
    def workers(self) -> int: ...

    def endpoints(self) -> list[tuple[str, Role]]:
        """(commit, role) of both endpoints, the reference (healthy) end first."""
        ...

    def known(self, commit: str) -> Evaluation | None: ...

    def fresh(self, commits: Sequence[str], more: MoreSamples | None) -> list[Evaluation]:
        """A fresh server for each entry (a commit may repeat), in the order given;
        counted and cached, not judged."""
        ...

    def testing(self, commit: str, role: Role, steps_left: int) -> None: ...

    def record_as(self, commit: str, role: Role, ev: Evaluation, cached: bool,
                  told: bool = True) -> Outcome:
        """Cache (unless ``cached``), judge, journal and report one evaluation (``told``:
        as a judged commit; else journaled and learned from only)."""
        ...


class CommitTrial(Protocol):
    """One commit under test (``VerdictPolicy.open``); see the module docstring."""

    @property
    def role(self) -> Role: ...

    @property
    def more(self) -> MoreSamples | None:
        """What the first server probes (None: the probe's first batch)."""
        ...

    def final(self, known: Evaluation) -> bool:
        """Whether a known evaluation is decided (else it is measured again)."""
        ...

    def resume(self, known: Evaluation) -> MoreSamples | None:
        """A known evaluation that is not ``final`` is measured again: a trial that can go on
        from its servers so far takes them over here and says what the next server probes
        (None: measure it afresh, with ``more``)."""
        ...

    def next_probe(self, evaluation: Evaluation) -> Again | None:
        """After one server: a fresh server with its ``more``, or None (decided)."""
        ...

    def evaluation(self, last: Evaluation) -> Evaluation:
        """The evaluation to judge and cache once decided (merged over its servers)."""
        ...

    def verdict(self, evaluation: Evaluation) -> Outcome:
        """The verdict (``from_cache`` False: the caller marks cached ones); pure, like
        ``VerdictPolicy.judge`` (the Tester calls ``VerdictPolicy.learn`` when it records)."""
        ...


@dataclass(frozen=True)
class Traits:
    """What a verdict policy is, read by the searches, the hook and ``policies.Plan``; one
    value (the two-level test's fall-back replaces it: ``pair_bound`` off, ``recalibrate``
    on; its calibration turns ``recalibrate`` off again).

    - ``needs_calibration``: calibrates on both endpoints before the search (``calibrate``).
    - ``supports_hook``: can judge one commit at a time under git's control (``git bisect
      run``); the hook refuses the policies that cannot.
    - ``multi_server``: a commit may be measured on several servers
      (``CommitTrial.next_probe``).
    - ``needs_reference``: verdicts are relative to the good endpoint's measurement (judged
      first, with ``Role.GOOD_ENDPOINT``).
    - ``pair_bound``: the whole-bisect error bound is spent on the final pair only: search
      steps decide at a looser error each, and the searches re-judge the two commits that end
      the search (the last good, the first bad) with ``Role.CONFIRM`` until both are decided
      at the bound (a single change point makes "parent good, culprit bad" sufficient). The
      hook cannot (git drives its search): its policy bounds every step.
    - ``models_range``: the policy is one model of the whole range (``changepoint``): its
      own search chooses and judges every commit (endpoints, rest checks: the same model on
      each side of a culprit); no per-commit verdict stands alone.
    - ``recalibrate``: the search should run the endpoint calibration again before its next
      step (a two-level search under ``pair_bound`` whose model went wrong: it then decides
      at the per-step bound, ``pair_bound`` off).
    """

    needs_calibration: bool = False
    supports_hook: bool = True
    multi_server: bool = False
    needs_reference: bool = False
    pair_bound: bool = False
    recalibrate: bool = False
    models_range: bool = False


class VerdictPolicy(Protocol):
    """See the module docstring."""

    @property
    def traits(self) -> Traits:
        """What the policy is, for the searches, the hook and the plan (:class:`Traits`)."""
        ...

    def calibrate(self, endpoints: EndpointMeasure, tests: int,
                  runs: ServerRuns | None = None) -> None:
        """``tests``: how many commits the search may judge (the error budget's split)."""
        ...

    def open(self, commit: str, role: Role) -> CommitTrial:
        """The commit goes to a server: its trial (see :class:`CommitTrial`)."""
        ...

    def judge(self, evaluation: Evaluation, role: Role) -> Outcome:
        """A verdict outside any trial (``from_cache`` False: the caller marks cached ones);
        pure: the policy learns nothing here (see :meth:`learn`)."""
        ...

    def learn(self, evaluation: Evaluation, role: Role, outcome: Outcome) -> None:
        """Learn from a recorded verdict (``outcome``: the evaluation's, by its trial or
        :meth:`judge`)."""
        ...
