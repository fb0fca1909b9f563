"""Every symptom at every judged commit, and where each one flips (pure).

The columns are the symptoms' registry's ``TABLE`` (``vllm_bisect.symptoms``): each symptom
declares how it is read from a probed entry of result.json (``shown``) against the reference
(the endpoint without the symptom: the good end; the fixed end of a find-the-fix search),
with the thresholds of a ``Screen``. The symptoms the bisect followed (``from_verdict``) are
the commits' own verdicts, so the table never contradicts them.
A flip is bracketed by the last probed commit without the symptom and the first with it;
symptoms whose brackets coincide flip at the same commit (one root cause, likely).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_bisect.symptoms import TABLE, Screen, SymptomInfo

SYMPTOMS = tuple(i.key for i in TABLE)


@dataclass(frozen=True)
class Flip:
    symptom: str
    last_without: int | None    # commit index
    first_with: int | None

    @property
    def exact(self) -> bool:
        return (self.last_without is not None and self.first_with is not None
                and self.first_with - self.last_without == 1)


def symptoms_of(p: dict[str, Any], ref_p: dict[str, Any] | None, screen: Screen,
                columns: tuple[SymptomInfo, ...] = TABLE) -> dict[str, bool | None]:
    """Symptoms of probed commit ``p`` (``ref_p``: the reference's probed entry)."""
    return {i.key: i.shown(p, ref_p, screen) for i in columns if i.shown is not None}


def table(probed: list[dict[str, Any]], ref_sha: str, screen: Screen, *,
          from_verdict: tuple[str, ...] = (), fix: bool = False
          ) -> dict[int, dict[str, bool | None]]:
    """index -> symptom -> present? (None: not measurable there). ``ref_sha``: the reference
    endpoint; ``from_verdict``: the symptoms the bisect followed, read from each commit's
    verdict (in a find-the-fix search, ``fix``, "good" is the old term: has the problem)."""
    ref_p = next((p for p in probed if p["commit"] == ref_sha), None)
    out = {}
    for p in probed:
        if p.get("index") is None:
            continue
        row = symptoms_of(p, ref_p, screen)
        for s in from_verdict:
            row[s] = shown_by_verdict(str(p.get("verdict")), fix)
        out[int(p["index"])] = row
    return out


def shown_by_verdict(verdict: str, fix: bool = False) -> bool | None:
    """Does a commit's verdict say the followed symptom shows there (None: a skip)?"""
    if verdict not in ("good", "bad"):
        return None
    return (verdict == "bad") != fix


def flips(rows: dict[int, dict[str, bool | None]]) -> list[Flip]:
    out = []
    for s in SYMPTOMS:
        seen = sorted((i, row[s]) for i, row in rows.items() if row.get(s) is not None)
        present = [i for i, v in seen if v]
        if not present:
            continue
        first = min(present)
        before = [i for i, v in seen if not v and i < first]
        out.append(Flip(s, max(before) if before else None, first))
    return out


def same_root(flips_: list[Flip]) -> bool:
    spans = {(f.last_without, f.first_with) for f in flips_}
    return len(spans) <= 1
