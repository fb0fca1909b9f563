"""The report's symptoms table: every symptom at every judged commit, where each flips, and
the follow-up bisects. The symptom the bisect followed is read from the commits' own
verdicts (so the table never contradicts them); every other column is a screen whose rule,
factor and reference the caption names (issue 42)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_bisect.symptoms import TABLE, Screen, Symptom, itl
from vllm_bisect.symptoms.itl import SCREEN_ITL_FACTOR
from vllm_bisect.verdict import symptoms

if TYPE_CHECKING:
    from vllm_bisect.report.result import BisectReport
    from vllm_bisect.spec import BisectSpec

# the strategies whose verdict on a continuous symptom is a change of at least the smallest
# one that matters against the reference (not a threshold)
NOISE_AWARE = ("twolevel", "sequential", "changepoint")

@dataclass(frozen=True)
class SymptomView:
    caption: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]     # index, then yes/no/- per symptom
    flips: list[tuple[str, str]]    # (symptom, where it flips)
    conclusion: str | None   # same cause or separate ones (only from verdicts)
    follow_ups: list[tuple[str, str]]   # (symptom, the command that follows it)


def session_spec(spec_text: str) -> BisectSpec:
    """The session's spec (the defaults when it is missing or cannot be read)."""
    import tomllib

    from vllm_bisect.errors import BisectError
    from vllm_bisect.spec import parse_spec

    try:
        return parse_spec(tomllib.loads(spec_text)) if spec_text else parse_spec({})
    except (tomllib.TOMLDecodeError, BisectError):
        return parse_spec({})


@dataclass(frozen=True)
class _Rules:
    """What each column of the table means for this session."""

    from_verdict: tuple[str, ...]   # columns that are the commits' verdicts
    screen: Screen
    ref: str                        # the reference endpoint's sha
    captions: dict[str, str]


def _rules(res: BisectReport, spec: BisectSpec) -> _Rules:
    from vllm_bisect.verdict.auto import smallest_change

    v = spec.verdict
    followed, fix = v.symptom.info, res.search == "fix"
    ref = res.bad if fix else res.good
    ref_name = f"the {'fixed' if fix else 'good'} endpoint `{ref[:12]}`"
    strategy = res.strategy_chosen or v.strategy.value
    itl_factor, max_itl_ms = itl.FACTOR.of(v), itl.LIMIT_MS.of(v)
    itl_judged = followed.key == "itl" or ("itl" in followed.covers and (
        itl_factor is not None or max_itl_ms is not None))
    screen = Screen(min_tokens=spec.min_output_tokens(),
                    itl_factor=itl_factor if itl_judged else itl_factor or SCREEN_ITL_FACTOR,
                    max_itl_ms=max_itl_ms if itl_judged else None,
                    verdict=v)
    caps = {}
    for i in TABLE:
        assert i.caption is not None
        text = i.caption(ref_name, screen)
        if i is followed:
            detail = (f"smallest change that matters {smallest_change(v):.3g}x against {ref_name}"
                      if i.noise.continuous and strategy in NOISE_AWARE else text)
            text = f"the verdict ({strategy}: {detail})"
        elif i.noise.continuous and i.key in followed.covers and itl_judged:
            text += " (the verdict's threshold)"
        elif i.noise.continuous and i.key in Symptom._value2member_map_:
            text += f" (a screen, not a verdict: this bisect followed `{followed.key}`)"
        caps[i.key] = text
    from_verdict = (followed.key,) if followed.shown is not None else ()
    return _Rules(from_verdict, screen, ref, caps)


def symptom_view(res: BisectReport, spec_text: str) -> SymptomView | None:
    """Every symptom per judged commit, where each flips, and the follow-up bisects."""
    spec = session_spec(spec_text)
    rules = _rules(res, spec)
    probed = [p.model_dump(mode="json") for p in res.judged()]
    rows = symptoms.table(probed, rules.ref, rules.screen, from_verdict=rules.from_verdict,
                          fix=res.search == "fix")
    fl = symptoms.flips(rows)
    if not fl:
        return None
    mark = {True: "yes", False: "no", None: "-"}
    flips = []
    for f in fl:
        where = (f"at commit #{f.first_with}" if f.exact else
                 f"between #{f.last_without} and #{f.first_with}" if f.last_without is not None
                 else f"at or before #{f.first_with}")
        if f.symptom not in rules.from_verdict:
            where += " (a screen, one measurement a commit: not a verdict)"
        flips.append((f.symptom, where))
    followed = spec.verdict.symptom.info
    covered = {followed.key, *followed.covers}
    follow = []
    for f in fl:
        if f.symptom in Symptom._value2member_map_ and Symptom(f.symptom).info.follow_up \
                and f.symptom not in covered:
            key = Symptom(f.symptom).info.factor_key
            given = getattr(rules.screen, key) if key else None
            extra = (f" --itl-factor {given:g}" if key == "itl_factor" and given
                     and not getattr(spec.verdict, key) else "")
            follow.append((f.symptom,
                           f"vllm-bisect run --spec spec.toml --symptom {f.symptom}{extra}"))
    # (a column that is neither always shown nor followed shows only where it has a value)
    cols = [i.key for i in TABLE if i.column_always or i.key in rules.from_verdict
            or any(row.get(i.key) is not None for row in rows.values())]
    return SymptomView(
        caption="Symptoms at each judged commit (" + "; ".join(
            f"{s}: {rules.captions[s]}" for s in cols) + ")",
        columns=("#", *cols),
        rows=[(str(i), *(mark[row[s]] for s in cols)) for i, row in sorted(rows.items())],
        flips=flips, conclusion=_conclusion(fl, rules.from_verdict), follow_ups=follow)


def _conclusion(fl: list[symptoms.Flip], from_verdict: tuple[str, ...]) -> str | None:
    """Same cause or separate ones: said only from verdicts (two symptoms the bisect judged);
    a screen's flip names no cause (None)."""
    judged = [f for f in fl if f.symptom in from_verdict]
    if len(judged) < 2:
        return None
    return ("the judged symptoms flip at the same commit (one root cause is likely)"
            if symptoms.same_root(judged) else
            "the judged symptoms flip at different commits: separate causes")
