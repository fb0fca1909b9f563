"""Reports of a finished session: Markdown to paste into a GitHub issue, one self-contained
HTML file with a plot per symptom, and JSON. Pure functions of the session's files."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_bisect.errors import BisectError, SessionError
from vllm_bisect.isolate.report import section_html as study_html
from vllm_bisect.isolate.report import section_lines as study_lines
from vllm_bisect.verdict import symptoms
from vllm_bisect.verdict.stats import bootstrap_change

COMMIT_URL = "https://github.com/vllm-project/vllm/commit/{sha}"
PR_URL = "https://github.com/vllm-project/vllm/pull/{pr}"
PR_IN_SUBJECT = re.compile(r"\(#(\d+)\)\s*$")
COLOURS = {"good": "#2e7d32", "bad": "#c62828", "skip": "#f9a825"}


@dataclass(frozen=True)
class SessionReport:
    session: Path
    result: dict[str, Any]
    spec_text: str

    @property
    def probed(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for p in self.result["probed"]:
            seen.setdefault(p["commit"], p)
        return sorted(seen.values(), key=lambda p: (p.get("index") is None, p.get("index") or 0))


def load(session: Path) -> SessionReport:
    res = session / "result.json"
    if not session.is_dir():
        raise SessionError(f"{session} is not a directory",
                           hint="pass the session directory `vllm-bisect run` printed "
                                "('session DIR')")
    if not res.exists():
        if not (session / "journal.sqlite").exists():
            raise SessionError(f"{session} is not a vllm-bisect session directory (it has "
                               "no journal.sqlite)",
                               hint="pass the session directory `vllm-bisect run` printed "
                                    "('session DIR'); by default it is under "
                                    "./vllm-bisect-sessions/")
        raise SessionError(f"{session} has no result.json (the bisect has not finished)",
                           hint=f"finish it with: vllm-bisect run --session {session}")
    spec = session / "spec.toml"
    try:
        result = json.loads(res.read_text(encoding="utf-8"))
        if not isinstance(result, dict) or "probed" not in result:
            raise ValueError("not a result object")
    except (ValueError, OSError) as err:
        raise SessionError(f"{res} cannot be read: {err}",
                           hint=f"write it again with: vllm-bisect run --session {session}"
                           ) from None
    return SessionReport(session, result, spec.read_text() if spec.exists() else "")


def pr_number(subject: str | None) -> str | None:
    m = PR_IN_SUBJECT.search(subject or "")
    return m.group(1) if m else None


def _f(x: Any, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _tokens(m: dict[str, Any] | None) -> str:
    if not m:
        return "-"
    outs = m.get("output_tokens") or []
    return "-" if not outs else (str(min(outs)) if min(outs) == max(outs)
                                 else f"{min(outs)}..{max(outs)}")


def _tok_s(m: dict[str, Any] | None) -> float | None:
    itl = (m or {}).get("itl_ms")
    return 1000.0 / itl if itl else None


def markdown(r: SessionReport) -> str:
    res = r.result
    lines = ["## vllm-bisect result", ""]
    if res["first_bad"]:
        sha, subject = res["first_bad"], res.get("first_bad_subject") or ""
        pr = pr_number(subject)
        label = "First fixed commit" if res.get("search") == "fix" else "First bad commit"
        if res.get("search") == "fix":
            lines.append("Find-the-fix search: old = has the problem, new = fixed.")
        lines.append(f"**{label}:** [`{sha[:12]}`]({COMMIT_URL.format(sha=sha)}) "
                     f"{subject}" + (f" ([#{pr}]({PR_URL.format(pr=pr)}))" if pr else ""))
    else:
        lines.append("**Inconclusive:** only commits that could not be tested separate good "
                     "from bad; no single commit is blamed. Candidates:")
        lines += [f"- [`{c[:12]}`]({COMMIT_URL.format(sha=c)})" for c in res["candidates"]]
    for effect in effects(r):
        lines.append(f"\nEffect at the first bad commit vs its parent: {effect}")
    for line in verification_lines(r):
        lines.append(f"\n{line}")
    lines += ["", f"Range: `{res['good'][:12]}` (good) .. `{res['bad'][:12]}` (bad), "
              f"{res['n_commits']} commits; {len(r.probed)} judged, {res['server_starts']} "
              f"server starts, {res['wall_s']:.0f} s.", "",
              "| # | commit | subject | output tokens | ITL ms/token | chunk ITL ms | tokens/chunk "
              "| acceptance | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for p in r.probed:
        m = p.get("measurement")
        mark = " **(first bad)**" if p["commit"] == res["first_bad"] else ""
        subject = (p.get("subject") or "").replace("|", "\\|")
        lines.append(f"| {p.get('index', '?')} | `{p['commit'][:12]}` | {subject} | {_tokens(m)} "
                     f"| {_f((m or {}).get('itl_ms'))} | {_f((m or {}).get('chunk_itl_ms'))} | "
                     f"{_f((m or {}).get('tokens_per_chunk'))} | "
                     f"{_f((m or {}).get('acceptance_length'))} | {p['verdict']}{mark} |")
    lines += symptom_lines(r)
    lines += study_lines(r.result, r.spec_text)  # isolate / deps / knobs (vllm_bisect.isolate)
    skips = [p for p in r.probed if p["verdict"] == "skip"]
    if skips:
        lines += ["", "Skipped (never judged):"]
        lines += [f"- `{p['commit'][:12]}`: {p['reason']}" for p in skips]
    env = next((p.get("environment") for p in r.probed if p.get("environment")), None)
    if env:
        lines += ["", "<details><summary>Environment</summary>", "", "```json",
                  json.dumps(env, indent=2), "```", "", "</details>"]
    artifact = next((p.get("artifact") for p in r.probed
                     if p["commit"] == res["first_bad"] and p.get("artifact")), None)
    lines += ["", "Reproduce:", "", "```bash",
              f"vllm-bisect run --spec spec.toml --good {res['good'][:12]} --bad {res['bad'][:12]}",
              "```"]
    if artifact:
        lines += ["", f"The first bad commit was served from `{artifact}`."]
    if r.spec_text:
        lines += ["", "<details><summary>spec.toml</summary>", "", "```toml",
                  r.spec_text.strip(), "```", "", "</details>"]
    return "\n".join(lines) + "\n"


def _spec_values(r: SessionReport) -> tuple[str, int | None, float | None]:
    """The followed symptom, the minimum output tokens and itl_factor of the session's spec."""
    import tomllib

    from vllm_bisect.spec import parse_spec

    try:
        spec = parse_spec(tomllib.loads(r.spec_text)) if r.spec_text else parse_spec({})
    except (tomllib.TOMLDecodeError, BisectError):
        spec = parse_spec({})
    return spec.verdict.symptom.value, spec.min_output_tokens(), spec.verdict.itl_factor


def symptom_lines(r: SessionReport) -> list[str]:
    """Every symptom per judged commit, where each flips, and the follow-up bisects."""
    followed, min_tokens, factor = _spec_values(r)
    rows = symptoms.table(r.probed, r.result["good"], min_tokens, factor)
    fl = symptoms.flips(rows)
    if not fl:
        return []
    mark = {True: "yes", False: "no", None: "-"}
    out = ["", "Symptoms at each judged commit (length: output below the minimum; itl: per-token "
           f"ITL above {factor or 1.5}x the good endpoint's; acceptance: acceptance length "
           "more than 10% lower; crash: the server or the probe failed):", "",
           "| # | " + " | ".join(symptoms.SYMPTOMS) + " |",
           "|---|" + "---|" * len(symptoms.SYMPTOMS)]
    for i, row in sorted(rows.items()):
        out.append(f"| {i} | " + " | ".join(mark[row[s]] for s in symptoms.SYMPTOMS) + " |")
    out.append("")
    for f in fl:
        where = (f"at commit #{f.first_with}" if f.exact else
                 f"between #{f.last_without} and #{f.first_with}" if f.last_without is not None
                 else f"at or before #{f.first_with}")
        out.append(f"- `{f.symptom}` flips {where}")
    out.append("- the symptoms flip at the same commit (one root cause is likely)"
               if symptoms.same_root(fl) else
               "- the symptoms flip at different commits: separate causes")
    covered = {"any": {"length", "itl"}}.get(followed, {followed})
    for f in fl:
        if f.symptom in ("length", "itl", "correctness") and f.symptom not in covered:
            extra = " --itl-factor 1.5" if f.symptom == "itl" and not factor else ""
            out.append(f"- follow `{f.symptom}` too (cached measurements are reused): "
                       f"`vllm-bisect run --spec spec.toml --symptom {f.symptom}{extra}`")
    return out


def effects(r: SessionReport) -> list[str]:
    """Culprit vs its last good parent, per metric, with 95% bootstrap CIs: from the
    verification's fresh samples when the culprit was re-measured, else from the search's."""
    res = r.result
    if not res["first_bad"]:
        return []
    v = res.get("verification")
    if v and v.get("culprit_per_request") and v.get("parent_per_request"):
        before_pr, after_pr = v["parent_per_request"], v["culprit_per_request"]
        source = f"re-measured with {v['samples']} requests each"
    else:
        by_commit = {p["commit"]: p for p in r.probed}
        culprit = by_commit.get(res["first_bad"])
        if culprit is None or culprit.get("index") is None:
            return []
        parents = [p for p in r.probed if p.get("index") is not None
                   and p["index"] < culprit["index"] and p["verdict"] == "good"]
        if not parents:
            return []
        parent = max(parents, key=lambda p: p["index"])
        before_pr, after_pr = parent.get("per_request") or {}, culprit.get("per_request") or {}
        source = "samples taken during the search"
    out = []
    for key, name, unit in (("itl_ms", "ITL", " ms/token"), ("output_tokens", "output tokens", "")):
        before = [float(x) for x in before_pr.get(key, []) if x is not None]
        after = [float(x) for x in after_pr.get(key, []) if x is not None]
        e = bootstrap_change(before, after, name)
        if e is not None and abs(e.change) >= 0.05:
            out.append(f"{e.describe(unit)}; {source}")
    return out


def verification_lines(r: SessionReport) -> list[str]:
    v = r.result.get("verification")
    if not v:
        return []
    if v["confirmed"]:
        return [f"Verified: re-measured on fresh servers ({v['samples']} requests each), the "
                f"culprit again judged bad ({v['culprit_reason']}) and its parent "
                f"{v['parent'][:12]} good ({v['parent_reason']})."]
    return [f"**Not verified**: re-measured with {v['samples']} requests each, the culprit "
            f"judged {v['culprit_verdict']} ({v['culprit_reason']}) and its parent "
            f"{v['parent'][:12]} {v['parent_verdict']} ({v['parent_reason']}). The symptom may "
            "be flaky: rerun with more samples (verdict.strategy = \"sequential\")."]


def _svg_plot(title: str, unit: str, points: list[tuple[int, float | None, str, bool]],
              width: int = 760, height: int = 220) -> str:
    """points: (commit index, value, verdict, is_culprit). Skips have no value."""
    pad_l, pad_r, pad_t, pad_b = 60, 20, 30, 35
    xs = [p[0] for p in points] or [0, 1]
    vals = [p[1] for p in points if p[1] is not None] or [0.0, 1.0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = 0.0, max(vals) * 1.15 or 1.0

    def px(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * (width - pad_l - pad_r)

    def py(y: float) -> float:
        return height - pad_b - (y - y0) / (y1 - y0) * (height - pad_t - pad_b)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" aria-label="{html.escape(title)}">',
           f'<text x="{pad_l}" y="18" font-size="14" font-weight="bold">{html.escape(title)} '
           f'({html.escape(unit)})</text>',
           f'<line x1="{pad_l}" y1="{py(0)}" x2="{width - pad_r}" y2="{py(0)}" stroke="#999"/>',
           f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{py(0)}" stroke="#999"/>']
    for frac in (0.0, 0.5, 1.0):
        tick = y0 + frac * (y1 - y0) / 1.15
        out.append(f'<text x="{pad_l - 6}" y="{py(tick) + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{tick:.4g}</text>')
    out.append(f'<text x="{(width + pad_l) / 2}" y="{height - 5}" font-size="11" '
               f'text-anchor="middle">commit (position in range)</text>')
    for x, v, verdict, culprit in points:
        colour = COLOURS.get(verdict, "#555")
        if culprit:
            out.append(f'<line class="culprit" x1="{px(x):.1f}" y1="{pad_t}" x2="{px(x):.1f}" '
                       f'y2="{py(0)}" stroke="{COLOURS["bad"]}" stroke-dasharray="4,3"/>')
            out.append(f'<text x="{px(x) + 4:.1f}" y="{pad_t + 10}" font-size="11" '
                       f'fill="{COLOURS["bad"]}">first bad</text>')
        if v is None:
            out.append(f'<text class="point {verdict}" x="{px(x):.1f}" y="{py(0) - 4:.1f}" '
                       f'font-size="12" text-anchor="middle" fill="{colour}">×</text>')
        else:
            out.append(f'<circle class="point {verdict}" cx="{px(x):.1f}" cy="{py(v):.1f}" r="5" '
                       f'fill="{colour}"><title>#{x}: {v:.3g} {html.escape(unit)} '
                       f'({verdict})</title></circle>')
        out.append(f'<text x="{px(x):.1f}" y="{py(0) + 14:.1f}" font-size="10" '
                   f'text-anchor="middle">{x}</text>')
    out.append("</svg>")
    return "\n".join(out)


def html_report(r: SessionReport) -> str:
    res = r.result
    culprit = res["first_bad"]

    def series(key: str) -> list[tuple[int, float | None, str, bool]]:
        pts = []
        for p in r.probed:
            m = p.get("measurement") or {}
            if key == "output_tokens":
                outs = m.get("output_tokens")
                v: float | None = min(outs) if outs else None
            elif key == "tok_s":
                v = _tok_s(m)
            else:
                v = m.get(key)
            pts.append((int(p.get("index") or 0), v, p["verdict"], p["commit"] == culprit))
        return pts

    plots = [_svg_plot("Output tokens (minimum over requests)", "tokens", series("output_tokens")),
             _svg_plot("Inter-token latency (server-counted tokens)", "ms/token", series("itl_ms")),
             _svg_plot("Decode speed", "tok/s", series("tok_s"))]
    md = html.escape(markdown(r))
    head = (f"First bad commit: <a href=\"{COMMIT_URL.format(sha=culprit)}\"><code>{culprit[:12]}"
            f"</code></a> {html.escape(res.get('first_bad_subject') or '')}" if culprit
            else "Inconclusive: only untestable commits separate good from bad.")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>vllm-bisect report</title><style>body{font-family:sans-serif;margin:24px;"
            "max-width:820px} pre{background:#f5f5f5;padding:8px;overflow-x:auto;font-size:12px}"
            "svg{display:block;margin:12px 0}</style></head><body>"
            f"<h1>vllm-bisect report</h1><p>{head}</p>"
            "<p>Points: <span style=\"color:#2e7d32\">● good</span> "
            "<span style=\"color:#c62828\">● bad</span> <span style=\"color:#f9a825\">× skipped"
            "</span>; the dashed line marks the first bad commit.</p>"
            + "".join(plots) + study_html(res)
            + f"<h2>Details</h2><pre>{md}</pre></body></html>\n")

