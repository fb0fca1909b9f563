"""Every symptom at every judged commit, and where each one flips (pure).

``length``: some output fell short of the minimum; ``itl``: per-token ITL above the limit
(``itl_factor`` times the reference's, or ``max_itl_ms``, whichever is lower: the threshold
judge's rule); ``acceptance``: acceptance length more than 10% below the reference's;
``correctness``: a greedy output differs from the reference's output of the same length
(text digests); ``crash``: the server died or the probe failed. The reference is the endpoint
without the symptom (the good end; the fixed end of a find-the-fix search). The symptoms the
bisect followed (``from_verdict``) are the commits' own verdicts, so the table never
contradicts them.
A flip is bracketed by the last probed commit without the symptom and the first with it;
symptoms whose brackets coincide flip at the same commit (one root cause, likely).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_bisect.models import FailureKind, legacy_failure

SYMPTOMS = ("length", "itl", "acceptance", "correctness", "crash")


@dataclass(frozen=True)
class Flip:
    symptom: str
    last_without: int | None    # commit index
    first_with: int | None

    @property
    def exact(self) -> bool:
        return (self.last_without is not None and self.first_with is not None
                and self.first_with - self.last_without == 1)


def symptoms_of(p: dict[str, Any], ref: dict[str, Any] | None, min_tokens: int | None,
                itl_factor: float, ref_p: dict[str, Any] | None = None,
                max_itl_ms: float | None = None) -> dict[str, bool | None]:
    """Symptoms of probed commit ``p`` (ref: the reference's measurement; ref_p: its whole
    probed entry, for the per-request text digests)."""
    m = p.get("measurement")
    if m is None:
        crashed = _crashed(p)
        return {"length": None, "itl": None, "acceptance": None, "correctness": None,
                "crash": crashed or None}
    outs = m.get("output_tokens") or []
    out: dict[str, bool | None] = {
        "length": bool(min_tokens and any(o < min_tokens for o in outs)), "crash": False}
    r_itl, itl = (ref or {}).get("itl_ms"), m.get("itl_ms")
    limit = min([x for x in (max_itl_ms, itl_factor * r_itl if r_itl else None)
                 if x is not None], default=None)
    out["itl"] = None if limit is None or itl is None else itl > limit
    r_acc, acc = (ref or {}).get("acceptance_length"), m.get("acceptance_length")
    out["acceptance"] = None if not r_acc or acc is None else acc < 0.9 * r_acc
    out["correctness"] = _wrong_text(p, ref_p)
    return out


def _crashed(p: dict[str, Any]) -> bool:
    """The entry's typed failure is a crash (a result written before the field: the error
    class its reason names)."""
    failure = p.get("failure")
    kind = legacy_failure(p.get("reason") or "") if failure is None else FailureKind(failure)
    return kind is not None and kind.crash


def _pairs(p: dict[str, Any] | None) -> list[tuple[int, str]]:
    pr = (p or {}).get("per_request") or {}
    return [(n, t) for n, t in zip(pr.get("output_tokens") or [], pr.get("text_sha256") or [],
                                   strict=False) if t]


def _wrong_text(p: dict[str, Any], ref_p: dict[str, Any] | None) -> bool | None:
    """A greedy output differs from the good endpoint's output of the same length (None:
    nothing of the same length to compare)."""
    ref = set(_pairs(ref_p))
    lengths = {n for n, _ in ref}
    got = [x for x in _pairs(p) if x[0] in lengths]
    return None if not got else any(x not in ref for x in got)


def table(probed: list[dict[str, Any]], ref_sha: str, min_tokens: int | None,
          itl_factor: float | None, *, max_itl_ms: float | None = None,
          from_verdict: tuple[str, ...] = (), fix: bool = False
          ) -> dict[int, dict[str, bool | None]]:
    """index -> symptom -> present? (None: not measurable there). ``ref_sha``: the reference
    endpoint; ``from_verdict``: the symptoms the bisect followed, read from each commit's
    verdict (in a find-the-fix search, ``fix``, "good" is the old term: has the problem)."""
    ref_p = next((p for p in probed if p["commit"] == ref_sha), None)
    ref = ref_p.get("measurement") if ref_p else None
    out = {}
    for p in probed:
        if p.get("index") is None:
            continue
        row = symptoms_of(p, ref, min_tokens, itl_factor or 1.5, ref_p, max_itl_ms)
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
