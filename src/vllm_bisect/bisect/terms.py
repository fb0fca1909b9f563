"""Bisect terms, as ``git bisect terms`` has them: a regression search (old = good, new = bad,
find the first bad commit) or a fix search (old = has the problem, new = fixed, find the first
fixed commit).

The search itself always runs on old/new: ``Verdict.GOOD`` means "like the old end",
``Verdict.BAD`` "like the new end". A judge says whether the symptom shows (BAD) or not
(GOOD); in a fix search that is swapped here, in one place, so "has the problem" is the old
term and "fixed" the new one. The judge's reference measurement (itl_factor,
throughput_factor, correctness) is the healthy end: the old end in a regression search, the
new (fixed) end in a fix search, so that end is judged first.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.models import Verdict
from vllm_bisect.spec import SearchKind


class Role(StrEnum):
    """Why a commit is measured (the value is what progress lines show). The endpoints have
    the names of the search's terms (``bisect.terms``): good/bad, or in a fix search "with
    the problem" (the old end) / "fixed" (the new end)."""

    GOOD_ENDPOINT = "good endpoint"
    BAD_ENDPOINT = "bad endpoint"
    PROBLEM_ENDPOINT = "endpoint with the problem"
    FIXED_ENDPOINT = "fixed endpoint"
    BISECT = "bisect"
    CONFIRM = "confirm"   # a bisect step judged at the final pair's error bound (pair_bound)
    VERIFY_CULPRIT = "verify culprit"
    VERIFY_PARENT = "verify parent"

    @property
    def endpoint(self) -> bool:
        return self in _ENDPOINTS

    @property
    def verifies(self) -> bool:
        return self in (Role.VERIFY_CULPRIT, Role.VERIFY_PARENT)


_ENDPOINTS = frozenset({Role.GOOD_ENDPOINT, Role.BAD_ENDPOINT, Role.PROBLEM_ENDPOINT,
                        Role.FIXED_ENDPOINT})


@dataclass(frozen=True)
class Terms:
    search: SearchKind = SearchKind.REGRESSION

    @property
    def fix(self) -> bool:
        return self.search is SearchKind.FIX

    @property
    def old(self) -> str:
        return "has the problem" if self.fix else "good"

    @property
    def new(self) -> str:
        return "fixed" if self.fix else "bad"

    @property
    def first_new(self) -> str:
        return "first fixed commit" if self.fix else "first bad commit"

    def verdict(self, judged: Verdict) -> Verdict:
        """The judge's verdict (BAD = the symptom shows) in old/new terms."""
        if not self.fix:
            return judged
        return {Verdict.GOOD: Verdict.BAD, Verdict.BAD: Verdict.GOOD}.get(judged, judged)

    def reference(self, rng: CommitRange) -> CommitInfo:
        """The endpoint without the symptom, whose measurement the judge compares against."""
        return rng.bad if self.fix else rng.good

    @property
    def reference_role(self) -> Role:
        """The role of the endpoint without the symptom (see ``reference``)."""
        return Role.FIXED_ENDPOINT if self.fix else Role.GOOD_ENDPOINT

    def endpoints(self, rng: CommitRange) -> list[tuple[CommitInfo, Role]]:
        """Both endpoints with their roles, the reference endpoint first."""
        old = (rng.good, Role.PROBLEM_ENDPOINT if self.fix else Role.GOOD_ENDPOINT)
        new = (rng.bad, Role.FIXED_ENDPOINT if self.fix else Role.BAD_ENDPOINT)
        return [new, old] if self.fix else [old, new]
