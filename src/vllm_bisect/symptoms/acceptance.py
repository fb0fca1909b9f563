"""``acceptance``: speculative decoding's acceptance length more than 10% below the
reference's. Read in the report's symptom table only (one measurement a commit, a screen):
no bisect follows it (the ``mtp-speedup`` symptom judges what it costs)."""

from __future__ import annotations

from typing import Any

from vllm_bisect.models import Verdict
from vllm_bisect.symptoms.base import Direction, Judged, Noise, Screen, SymptomInfo, measured

DROP = 0.9   # below 90% of the reference's acceptance length


def _shown(p: dict[str, Any], ref: dict[str, Any] | None, s: Screen) -> bool | None:
    if (m := measured(p)) is None:
        return None
    r_acc, acc = (measured(ref) or {}).get("acceptance_length"), m.get("acceptance_length")
    return None if not r_acc or acc is None else acc < DROP * r_acc


ACCEPTANCE = SymptomInfo(
    key="acceptance", about="acceptance length more than 10% below the reference's",
    direction=Direction.FALLS, noise=Noise.SERVER,
    judge=lambda m, ref, v, floor: Judged(Verdict.SKIP, "acceptance is not followed"),
    shown=_shown,
    caption=lambda ref_name, s: f"acceptance length more than 10% below {ref_name}'s")
