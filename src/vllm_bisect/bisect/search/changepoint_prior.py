"""The model of the range's prior for a spec (the symptom's direction, the smallest change
that matters, the search's or a rest check's model weights) and the requests a server runs at
least: shared by the search (:mod:`vllm_bisect.bisect.search.changepoint`) and the forecast
(:mod:`vllm_bisect.bisect.forecast_events`), which asks what the search will ask."""

from __future__ import annotations

from vllm_bisect.spec import SearchKind, VerdictSpec
from vllm_bisect.verdict.auto import direction, log_min_change, per_request
from vllm_bisect.verdict.changepoint import Prior

__all__ = ["END_REQUESTS", "REST_PRIOR", "SEARCH_PRIOR", "least_requests", "model_prior"]

# a rest check (one side of a culprit, bisect/multi.py) is the same search with a prior that
# expects no second step (most regressions are one commit): it ends "explained" once
# P(a change that matters: a step or a drift) < changepoint.REST_EXPLAINED, goes on as a
# search once it is >= REST_BISECT, and measures the sub-range's ends in between
# (verdict.rest_servers at most)
REST_PRIOR = dict(step=0.09, step_drift=0.01, none=0.81, drift=0.09)
# the search's own prior. The posterior's two-step model (a plateau between two steps on the
# bad side of the first) is not used: measured (docs/benchmarks.md, session 22), at 0.05 it
# named no commit in 6 of 30 runs of one 2x step under 10% server noise (a 5% first step
# hidden before the step could not be ruled out), and at 0.01 the clean one-step rows fell
# from 100% to 96.7-98% exact, while two 1.3x steps gained no more than 30 runs can tell
SEARCH_PRIOR: dict[str, float] = dict(two_step=0.0)
END_REQUESTS = 3      # the ends' servers run at least this many requests (the request spread)


def model_prior(v: VerdictSpec, search: SearchKind, rest: bool = False) -> Prior:
    """The model's prior for ``v``'s symptom: its direction (inverted in a fix search), the
    smallest change that matters, and the search's (or a rest check's) model weights."""
    sign = -1 if search is SearchKind.FIX else 1
    return Prior(direction=direction(v.symptom) * sign, min_step=log_min_change(v),
                 per_request=per_request(v.symptom), **(REST_PRIOR if rest else SEARCH_PRIOR))


def least_requests(prior: Prior, asked: int) -> int:
    """A server's requests at least: ``probe.requests``, and three where the requests are
    samples (a server of one or two cannot tell its level from its requests' spread: two
    1.3x steps, n = 32, probe.requests = 1: 90% -> 97% both named, 400 runs)."""
    return max(END_REQUESTS if prior.per_request else 1, asked)
