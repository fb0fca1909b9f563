"""``any``: output length or ITL against the written thresholds (``min_output_tokens``,
``max_itl_ms`` / ``itl_factor``), the default symptom."""

from __future__ import annotations

from vllm_bisect.symptoms.base import Direction, Noise, SymptomInfo
from vllm_bisect.symptoms.plain import itl_reference, judge_plain

ANY = SymptomInfo(
    key="any", about="output length or ITL against the written thresholds",
    direction=Direction.DIFFERS, noise=Noise.DETERMINISTIC,
    judge=lambda m, ref, v, floor: judge_plain(m, ref, v, floor, length=True, itl=True),
    needs_reference=itl_reference,
    auto_why='auto: symptom "any" judges length and ITL against the written thresholds',
    bot_command=True, covers=("length", "itl"))
