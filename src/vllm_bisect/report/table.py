"""The final table and the JSON result of a bisect (no printing here)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from vllm_bisect.bisect.driver import BisectResult
from vllm_bisect.models import EvalStatus, Evaluation, Measurement, Outcome, Verdict

STYLE = {Verdict.GOOD: "green", Verdict.BAD: "red", Verdict.SKIP: "yellow"}
_NO_EVAL = Evaluation(commit="", status=EvalStatus.FAILED)


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _tokens(o: Outcome) -> str:
    if o.measurement is None:
        return "-"
    outs = o.measurement.output_tokens
    lo, hi = min(outs, default=0), max(outs, default=0)
    return str(lo) if lo == hi else f"{lo}..{hi}"


def result_table(result: BisectResult) -> Table:
    subjects = {c.sha: c.subject for c in (result.range.good, *result.range.commits)}
    order = {c.sha: i for i, c in enumerate((result.range.good, *result.range.commits))}
    table = Table(title="vllm-bisect", show_lines=False)
    for col in ("#", "commit", "subject", "out tok", "ITL ms", "chunk ITL", "tok/chunk",
                "accept", "verdict"):
        left = col in ("commit", "subject", "verdict")
        table.add_column(col, justify="left" if left else "right", no_wrap=True,
                         overflow="ellipsis", max_width=48 if col == "subject" else None)
    seen = set()
    # a fix search runs on old/new terms: good = has the problem, bad = fixed
    labels = {"good": "has the problem", "bad": "fixed"} if result.search == "fix" else {}
    for o in sorted(result.probed, key=lambda o: order.get(o.commit, -1)):
        if o.commit in seen:
            continue
        seen.add(o.commit)
        m = o.measurement
        mark = (f" <- first {'fixed' if result.search == 'fix' else 'bad'}"
                if o.commit == result.first_bad else "")
        table.add_row(str(order.get(o.commit, "?")), o.commit[:12],
                      subjects.get(o.commit, "")[:60], _tokens(o),
                      _fmt(m.itl_ms if m else None), _fmt(m.chunk_itl_ms if m else None),
                      _fmt(m.tokens_per_chunk if m else None),
                      _fmt(m.acceptance_length if m else None),
                      f"[{STYLE[o.verdict]}]{labels.get(o.verdict.value, o.verdict.value)}[/]"
                      f"{mark}")
    return table


def result_json(result: BisectResult) -> dict[str, Any]:
    commits = (result.range.good, *result.range.commits)
    subjects = {c.sha: c.subject for c in commits}
    order = {c.sha: i for i, c in enumerate(commits)}
    return {
        # search = "fix": old = has the problem, new = fixed, and first_bad is the first
        # fixed commit (the bisect ran with inverted terms)
        "search": result.search,
        "first_new_label": "first fixed commit" if result.search == "fix" else "first bad commit",
        "first_bad": result.first_bad,
        "first_bad_subject": subjects.get(result.first_bad or ""),
        "candidates": result.candidates,
        "good": result.range.good.sha,
        "bad": result.range.bad.sha,
        "n_commits": len(result.range.commits),
        "probed": [
            {"commit": o.commit, "index": order.get(o.commit), "subject": subjects.get(o.commit),
             "verdict": o.verdict.value, "reason": o.reason, "from_cache": o.from_cache,
             "artifact": (result.evaluations.get(o.commit) or _NO_EVAL).artifact,
             "environment": (result.evaluations.get(o.commit) or _NO_EVAL).environment,
             "measurement": o.measurement.model_dump(mode="json", exclude={"requests"})
             if o.measurement else None,
             "per_request": _per_request(o.measurement)}
            for o in result.probed
        ],
        "verification": _verification(result),
        "confidence": result.confidence,
        "server_starts": result.server_starts,
        "rounds": result.rounds,
        "workers": result.workers,
        "wall_s": round(result.wall_s, 3),
    }


def _per_request(m: Measurement | None) -> dict[str, list[Any]] | None:
    if m is None:
        return None
    return {"itl_ms": [r.itl_ms for r in m.requests],
            "output_tokens": [r.output_tokens for r in m.requests],
            "text_sha256": [r.text_sha256 for r in m.requests]}


def _verification(result: BisectResult) -> dict[str, Any] | None:
    v = result.verification
    if v is None:
        return None
    return {"culprit": v.culprit, "parent": v.parent, "samples": v.samples,
            "confirmed": v.confirmed,
            "culprit_verdict": v.culprit_verdict.value, "culprit_reason": v.culprit_reason,
            "parent_verdict": v.parent_verdict.value, "parent_reason": v.parent_reason,
            "culprit_per_request": _per_request(v.culprit_measurement),
            "parent_per_request": _per_request(v.parent_measurement)}
