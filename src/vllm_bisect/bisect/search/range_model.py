"""What the model of the range's search reads from a recorded evaluation (its servers) and
what it concludes (:class:`RangeModel`, for the result and the reports); split from
:mod:`vllm_bisect.bisect.search.changepoint`."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from vllm_bisect.models import Evaluation
from vllm_bisect.verdict.auto import samples_of
from vllm_bisect.verdict.changepoint import Posterior, Server, summarise


class RangeModel(BaseModel):
    """What the model of the range concluded, for the result and the reports: P of the
    culprit (or of the likeliest interval), P(no step that matters), P(a drift), the step
    (new / old, the symptom's units) with its ~95% interval, the servers it rests on, and
    P(first bad = k) per commit index (those above 0.1%). ``rate_before``: a symptom a
    server shows or not: ``effect`` is then the new side's rate, this the old side's.
    result.json writes it as it is (``report.result.RangeModelDoc``: this and its text)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    p: float
    none: float
    drift: float
    effect: float
    effect_lo: float
    effect_hi: float
    servers: int
    posterior: tuple[tuple[int, float], ...] = ()
    rate_before: float | None = None


def servers_of(ev: Evaluation, index: int, symptom: object) -> list[Server]:
    """The servers in an evaluation: a merged one (``samples``: the symptom's samples on
    their natural scale, one list per server, as the two-level policy writes them too: a
    result cache or journal that strategy filled is read the same) gives each; else its
    measurement's samples are one server."""
    if ev.samples:
        out = [summarise(index, g) for g in ev.samples if g]
    else:
        out = [summarise(index, samples_of(ev.measurement, symptom))]  # type: ignore[arg-type]
    return [s for s in out if s is not None]


def summary(post: Posterior, p: float) -> RangeModel:
    eff, lo, hi = post.effect_interval()
    pk = post.per_commit()
    keep = tuple((int(k), float(pk[k])) for k in np.flatnonzero(pk > 1e-3))
    return RangeModel(p=p, none=post.none, drift=post.drift, effect=eff, effect_lo=lo,
                      effect_hi=hi, servers=post.servers, posterior=keep,
                      rate_before=post.rate[3] if post.rate is not None else None)
