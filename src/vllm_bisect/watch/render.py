"""watch's report: a Markdown table and an HTML page with one plot per metric (the series,
its change points and their location windows). No printing: the CLI writes the files."""

from __future__ import annotations

import html
from dataclasses import dataclass

from vllm_bisect.report.plot import HEIGHT, PAD_B, PAD_L, PAD_R, PAD_T, WIDTH, nice_ticks, tick_label
from vllm_bisect.watch.plan import Finding
from vllm_bisect.watch.series import Series


@dataclass(frozen=True)
class WindowResult:
    """What the bisect of one finding's window found (None: not bisected)."""

    name: str
    culprit: str | None
    subject: str | None
    note: str                       # "culprit", "no repro", "no single culprit", an error
    session: str | None = None


def row(f: Finding, commits: int | None = None) -> dict[str, object]:
    """One finding as JSON; ``commits``: first-parent commits in its window (None: no
    repository resolved the series' commits)."""
    return {"metric": f.metric, "direction": f.direction.value, "reported": f.cp.reported,
            "last_before": f.before.commit or f.before.ref,
            "first_after": f.after.commit or f.after.ref,
            "points_in_window": f.points, "commits_in_window": commits,
            "before": round(f.cp.before, 6),
            "after": round(f.cp.after, 6), "change": round(f.cp.change, 6),
            "confidence": round(f.cp.confidence, 6), "spread": round(f.cp.spread, 6),
            "why": f.cp.why}


def _short(ref: str) -> str:
    return ref[:12] if len(ref) == 40 else ref


def cell(text: str) -> str:
    """Text for one Markdown table cell: one line (a line break would end the row), a
    literal "|" escaped (it would split the cell)."""
    return " ".join(text.split()).replace("|", "\\|")


def window_text(points: int, commits: int | None) -> str:
    """What lies between a finding's last point before and first point after, as the table,
    the terminal and watch.md all say it."""
    return (f"{points} point{'' if points == 1 else 's'} between, "
            + ("commits unknown (no repository)" if commits is None else
               f"{commits} commit{'' if commits == 1 else 's'}"))


def markdown(series: Series, findings: list[Finding], results: dict[str, WindowResult],
             commits: dict[str, int | None] | None = None) -> str:
    """``commits``: the commits in each finding's window (None or absent: unknown)."""
    lines = [f"# vllm-bisect watch: {len(series.points)} points ({series.source})", "",
             "| metric | change | last before | first after | points between | commits | size "
             "| confidence | culprit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for f in findings:
        if not f.cp.reported:
            continue
        r = results.get(f.name)
        culprit = (f"`{_short(r.culprit)}` {cell(r.subject or '')}" if r and r.culprit
                   else cell(r.note) if r else "not bisected")
        n = (commits or {}).get(f.name)
        lines.append(f"| {cell(f.metric)} | {f.direction.value} | "
                     f"`{_short(f.before.commit or f.before.ref)}` | "
                     f"`{_short(f.after.commit or f.after.ref)}` | {f.points} | "
                     f"{'unknown' if n is None else n} | {f.cp.change:+.1%} | "
                     f"{f.cp.confidence:.4f} | {culprit} |")
    quiet = [f for f in findings if not f.cp.reported]
    if quiet:
        lines += ["", "Not reported (inside the series' run-to-run spread):", ""]
        lines += [f"- {f.metric} at point {f.cp.index}: {f.cp.why}" for f in quiet]
    if not any(f.cp.reported for f in findings):
        lines += ["", "No change point outside the series' run-to-run spread."]
    lines += [f"\n{line}" for line in nonfinite_lines(series)]
    return "\n".join(lines) + "\n"


def nonfinite_lines(series: Series) -> list[str]:
    """One line per metric with inf or nan values: those points are left out of its series
    (a step to inf is not judged), and said so."""
    out = []
    for metric, bad in series.nonfinite().items():
        shown = ", ".join(f"{_short(ref)}: {v}" for ref, v in bad[:5])
        out.append(f"Not finite, left out of {metric}: {len(bad)} point(s) ({shown}"
                   f"{', ...' if len(bad) > 5 else ''}); a change to inf or nan is not judged "
                   "here: look at those runs")
    return out


def svg_plot(series: Series, metric: str, findings: list[Finding]) -> str:
    pts, values = series.column(metric)
    lo, hi = min(values), max(values)
    ticks = nice_ticks(lo, hi if hi > lo else lo + 1)
    y0, y1 = ticks[0], ticks[-1]
    w, h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B
    n = max(len(values) - 1, 1)

    def x(i: float) -> float:
        return PAD_L + w * i / n

    def y(v: float) -> float:
        return PAD_T + h * (1 - (v - y0) / ((y1 - y0) or 1))

    parts = [f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(metric)}">',
             f'<text x="{PAD_L}" y="18" font-size="13">{html.escape(metric)}</text>']
    for f in findings:
        if f.metric != metric or not f.cp.reported:
            continue
        colour = "#c62828" if f.direction.value == "regression" else "#2e7d32"
        parts.append(f'<rect x="{x(f.cp.lo - 1):.1f}" y="{PAD_T}" width="{x(f.cp.hi) - x(f.cp.lo - 1):.1f}"'
                     f' height="{h}" fill="{colour}" opacity="0.15"/>')
        parts.append(f'<line x1="{x(f.cp.index - 0.5):.1f}" x2="{x(f.cp.index - 0.5):.1f}" '
                     f'y1="{PAD_T}" y2="{PAD_T + h}" stroke="{colour}" stroke-dasharray="4 3"/>')
    for t in ticks:
        parts.append(f'<text x="{PAD_L - 6}" y="{y(t) + 4:.1f}" font-size="11" '
                     f'text-anchor="end">{tick_label(t)}</text>')
    line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    parts.append(f'<polyline points="{line}" fill="none" stroke="#1565c0" stroke-width="1.5"/>')
    for i, (p, v) in enumerate(zip(pts, values, strict=True)):
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.5" fill="#1565c0">'
                     f"<title>{html.escape(_short(p.commit or p.ref))}: {v:.6g}</title></circle>")
    parts.append("</svg>")
    return "\n".join(parts)


def html_page(series: Series, findings: list[Finding], results: dict[str, WindowResult],
              commits: dict[str, int | None] | None = None) -> str:
    metrics = list(dict.fromkeys(f.metric for f in findings if f.cp.reported))
    body = [f"<h1>vllm-bisect watch</h1><p>{len(series.points)} points ({series.source})</p>"]
    body += [f"<figure>{svg_plot(series, m, findings)}</figure>" for m in metrics]
    body.append("<pre>" + html.escape(markdown(series, findings, results, commits)) + "</pre>")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>vllm-bisect watch</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}svg{width:100%}"
            "</style></head><body>" + "\n".join(body) + "</body></html>\n")
