"""The effect at the culprit: the culprit against its last good parent, per metric that
matters, each with its 95% interval and what the interval rests on (issue 50).

From the verification's samples when there is one: fresh servers (``verify_samples``
requests each), the final pair's servers (the two-level confirmation at the whole-bisect
bound) or the search's runs and re-checks (a deterministic cap); else from the samples the
search took. A two-level symptom's interval is over the servers' means when a side ran on
several (a server is its unit); otherwise a bootstrap over the requests; a metric with no
spread on either side is the change itself (a deterministic cap: every request the same).
Worked out once when result.json is written (its ``effects``); pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_bisect.models import Verdict
from vllm_bisect.report.result import BisectReport, EffectDoc, PerRequest, VerificationDoc
from vllm_bisect.spec import VerdictSpec
from vllm_bisect.spec.verdict import Symptom
from vllm_bisect.symptoms import by_key
from vllm_bisect.verdict.stats import (
    Effect,
    Interval,
    bootstrap_change,
    server_change,
    server_spread,
)

if TYPE_CHECKING:
    from vllm_bisect.bisect.driver import BisectResult

Servers = dict[str, list[list[float]]]   # commit -> its servers' samples (natural scale)

UNITS = {"ITL": " ms/token", "output tokens": ""}
SIDES = ("the parent", "the culprit")
TWO_LEVEL = ("twolevel", "changepoint")   # strategies whose unit is the server


def servers_of(result: BisectResult) -> Servers:
    """A two-level session's servers per commit (each evaluation's merged samples): the
    servers' spread the effect's interval pools (none for another strategy)."""
    if result.strategy_chosen != "twolevel":
        return {}
    return {sha: [list(g) for g in ev.samples] for sha, ev in result.evaluations.items()
            if ev.samples}


def effect_docs(res: BisectReport, verdict: VerdictSpec,
                servers: Servers | None = None) -> list[EffectDoc]:
    """The culprit's effects, the bisected symptom's metric first; another metric only when
    its interval is off zero by more than what matters. ``servers``: every commit's servers
    (:func:`servers_of`), whose spread a two-level interval pools."""
    culprit = res.culprit()
    if culprit is None:
        return []
    v = res.verification
    servers_b = servers_a = 1
    before: PerRequest | None
    after: PerRequest | None
    groups: tuple[list[list[float]] | None, list[list[float]] | None] = (None, None)
    if v and v.culprit_per_request and v.parent_per_request:
        before, after = v.parent_per_request, v.culprit_per_request
        servers_b, servers_a = v.parent_servers, v.culprit_servers
        groups = (v.parent_server_samples, v.culprit_server_samples)
        source = _source(v)
    else:
        if culprit.index is None:
            return []
        parents = [p for p in res.judged() if p.index is not None and p.index < culprit.index
                   and p.verdict is Verdict.GOOD]
        if not parents:
            return []
        parent = max(parents, key=lambda p: p.index or 0)
        groups = ((servers or {}).get(parent.commit), (servers or {}).get(culprit.commit))
        before, after = parent.per_request, culprit.per_request
        servers_b, servers_a = parent.servers or 1, culprit.servers or 1
        source = ("samples taken during the search (no verification: "
                  + ("the model of the range judged the pair)" if res.model else
                     "verify_samples = 0)" if verdict.verify_samples == 0 else
                     "none ran)"))
    if before is None or after is None:
        return []
    led, small = _bisected_metrics(verdict, culprit.reason)
    series: dict[str, tuple[list[float | None], list[float | None]]] = {
        "ITL": (list(before.itl_ms), list(after.itl_ms)),
        "output tokens": (list(map(float, before.output_tokens)),
                          list(map(float, after.output_tokens)))}
    out = []
    for name in sorted(series, key=lambda n: n not in led):   # the bisected symptom first
        b, a = series[name]
        e: Effect | None = None
        if (name == "ITL" and verdict.symptom is Symptom.ITL
                and res.strategy_chosen in TWO_LEVEL and not res.model):
            b_groups = groups[0] or ([_itl(b)] if servers_b == 1 else None)
            a_groups = groups[1] or ([_itl(a)] if servers_a == 1 else None)
            compared = {culprit.commit, *([v.parent] if v else []),
                        *_parent_of(res, culprit.index)}   # their servers: b/a_groups
            others = [g for sha, g in (servers or {}).items() if sha not in compared]
            if b_groups and a_groups:   # the servers are the unit
                e = server_change(b_groups, a_groups, name,
                                  server_spread([*others, b_groups, a_groups]))
        if e is None:
            e = bootstrap_change([float(x) for x in b if x is not None],
                                 [float(x) for x in a if x is not None], name,
                                 servers=(servers_b, servers_a))
        if e is None:
            continue
        if not (name in led or (e.ci_low is not None and e.ci_high is not None
                                and (e.ci_low > small[name] or e.ci_high < -small[name]))):
            continue
        note = source
        if (e.interval is Interval.BOOTSTRAP and name == "ITL" and name in led
                and res.strategy_chosen in TWO_LEVEL):   # (a server has a level of its own)
            note += ("; a bootstrap over requests: the spread between servers is not in it"
                     + (" (the model's interval is over the servers)" if res.model else ""))
        out.append(EffectDoc(
            metric=e.metric, before=e.before, after=e.after, change=e.change,
            ci_low=e.ci_low, ci_high=e.ci_high, interval=e.interval.value,
            requests_before=e.n_before, requests_after=e.n_after,
            servers_before=e.servers_before, servers_after=e.servers_after, source=note,
            text=f"{e.describe(UNITS[name], SIDES)}; {note}"))
    return out


def _itl(xs: list[float | None]) -> list[float]:
    return [float(x) for x in xs if x]


def _parent_of(res: BisectReport, index: int | None) -> set[str]:
    """The commit the search's samples compare the culprit with (its highest good one)."""
    good = [p for p in res.judged() if p.index is not None and index is not None
            and p.index < index and p.verdict is Verdict.GOOD]
    return {max(good, key=lambda p: p.index or 0).commit} if good else set()


def _source(v: VerificationDoc) -> str:
    if v.source == "rechecks":
        return "the search's runs and its re-checks (a deterministic cap: no fresh server)"
    if v.source == "confirmation":
        return ("the final pair's servers, judged at the whole-bisect bound (no fresh "
                "server)")
    return f"re-measured on fresh servers (verify_samples = {v.samples})"


def _bisected_metrics(v: VerdictSpec, reason: str) -> tuple[set[str], dict[str, float]]:
    """The metrics the bisected symptom is judged on, and per metric the smallest relative
    change that matters (the spec's itl_factor, else 1 + min_effect)."""
    small = {"ITL": Symptom.ITL.info.smallest_change(v) - 1.0, "output tokens": v.min_effect}
    info = v.symptom.info
    led = {i.effect_series for i in (info, *(by_key(k) for k in info.covers))
           if i is not None and i.effect_series}
    if len(led) > 1:   # (any) the culprit's own reason says which was bad: its last word
        led = {n for n in led if n.split()[-1] in reason} or led
    return led, small
