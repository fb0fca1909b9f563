"""The report's symptoms table: every symptom at every judged commit, where each flips, and
the follow-up bisects. The symptom the bisect followed is read from the commits' own
verdicts (so the table never contradicts them); every other column is a screen whose rule,
factor and reference the caption names (issue 42)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_bisect.verdict import symptoms

if TYPE_CHECKING:
    from vllm_bisect.report.result import BisectReport
    from vllm_bisect.spec import BisectSpec

SCREEN_ITL_FACTOR = 1.5   # the ITL screen of a bisect that did not follow ITL


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
    itl_factor: float | None
    max_itl_ms: float | None
    min_tokens: int | None
    ref: str                        # the reference endpoint's sha
    captions: dict[str, str]


def _rules(res: BisectReport, spec: BisectSpec) -> _Rules:
    from vllm_bisect.verdict.auto import smallest_change

    v = spec.verdict
    followed, fix = v.symptom.value, res.search == "fix"
    ref = res.bad if fix else res.good
    ref_name = f"the {'fixed' if fix else 'good'} endpoint `{ref[:12]}`"
    strategy = res.strategy_chosen or v.strategy.value
    verdict_rule = f"the verdict ({strategy}"
    min_tokens = spec.min_output_tokens()
    caps = {"length": f"output below {min_tokens} tokens" if min_tokens else
            "output below the minimum (none set)"}
    from_verdict: tuple[str, ...] = ()
    itl_factor, max_itl = v.itl_factor, v.max_itl_ms
    if followed in ("length", "correctness", "crash"):
        from_verdict = (followed,)
        caps[followed] = f"{verdict_rule}: {caps.get(followed, followed)})"
    if followed == "itl":
        from_verdict = ("itl",)
        detail = (f"smallest change that matters {smallest_change(v):.3g}x against {ref_name}"
                  if strategy in ("twolevel", "sequential") else
                  _itl_limit_text(itl_factor, max_itl, ref_name))
        caps["itl"] = f"{verdict_rule}: {detail})"
    elif followed == "any" and (itl_factor is not None or max_itl is not None):
        caps["itl"] = (f"{_itl_limit_text(itl_factor, max_itl, ref_name)} (the verdict's "
                       "threshold)")
    else:
        itl_factor, max_itl = itl_factor or SCREEN_ITL_FACTOR, None
        caps["itl"] = (f"{_itl_limit_text(itl_factor, None, ref_name)} (a screen, not a "
                       f"verdict: this bisect followed `{followed}`)")
    caps.setdefault("correctness", f"a greedy output differs from {ref_name}'s")
    caps["acceptance"] = f"acceptance length more than 10% below {ref_name}'s"
    caps.setdefault("crash", "the server or the probe failed")
    return _Rules(from_verdict, itl_factor, max_itl, min_tokens, ref, caps)


def _itl_limit_text(factor: float | None, max_ms: float | None, ref_name: str) -> str:
    parts = ([f"{factor:.3g}x {ref_name}'s"] if factor is not None else []) + (
        [f"{max_ms:g} ms"] if max_ms is not None else [])
    return "per-token ITL above " + " or ".join(parts) if parts else "per-token ITL"


def symptom_view(res: BisectReport, spec_text: str) -> SymptomView | None:
    """Every symptom per judged commit, where each flips, and the follow-up bisects."""
    spec = session_spec(spec_text)
    rules = _rules(res, spec)
    probed = [p.model_dump(mode="json") for p in res.judged()]
    rows = symptoms.table(probed, rules.ref, rules.min_tokens, rules.itl_factor,
                          max_itl_ms=rules.max_itl_ms, from_verdict=rules.from_verdict,
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
    followed = spec.verdict.symptom.value
    covered = {"any": {"length", "itl"}}.get(followed, {followed})
    follow = []
    for f in fl:
        if f.symptom in ("length", "itl", "correctness") and f.symptom not in covered:
            extra = (f" --itl-factor {rules.itl_factor:g}"
                     if f.symptom == "itl" and not spec.verdict.itl_factor else "")
            follow.append((f.symptom,
                           f"vllm-bisect run --spec spec.toml --symptom {f.symptom}{extra}"))
    return SymptomView(
        caption="Symptoms at each judged commit (" + "; ".join(
            f"{s}: {rules.captions[s]}" for s in symptoms.SYMPTOMS) + ")",
        columns=("#", *symptoms.SYMPTOMS),
        rows=[(str(i), *(mark[row[s]] for s in symptoms.SYMPTOMS))
              for i, row in sorted(rows.items())],
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
