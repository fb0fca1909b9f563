"""A small self-contained SVG of the reported deltas (microseconds per decode step)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from vllm_bisect.explain.diff import Delta

WIDTH, ROW, LABEL = 760, 22, 330


def deltas_svg(deltas: Sequence[Delta]) -> str:
    """One bar per delta: red where the culprit is slower, green where faster."""
    rows = [d for d in deltas if d.key != "step:launches"]
    height = 40 + ROW * max(1, len(rows))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           'font-family="sans-serif" font-size="12">',
           '<text x="4" y="16" font-weight="bold">Change per decode step, culprit - parent '
           '(us)</text>']
    if not rows:
        out.append('<text x="4" y="38">no change outside the run-to-run spread</text>')
    scale = (WIDTH - LABEL - 90) / max((abs(d.diff) for d in rows), default=1.0)
    for i, d in enumerate(rows):
        y = 28 + i * ROW
        w = max(1.0, abs(d.diff) * scale)
        colour = "#c0392b" if d.diff > 0 else "#27ae60"
        label = escape(f"{d.name or d.key} ({d.kind.value})"[:52])
        out.append(f'<text x="4" y="{y + 14}">{label}</text>')
        out.append(f'<rect x="{LABEL}" y="{y + 3}" width="{w:.1f}" height="{ROW - 6}" '
                   f'fill="{colour}"/>')
        out.append(f'<text x="{LABEL + w + 4:.1f}" y="{y + 14}">{d.diff:+.1f}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
