"""Reports of a finished session: Markdown to paste into a GitHub issue, and one
self-contained HTML page (jinja2 template ``templates/report.html.j2``) with a plot per
symptom. Both render the same :class:`~vllm_bisect.report.view.ReportView`; pure functions
of the session's files. :func:`write_section` is the one place a study (isolate, deps, knobs,
explain) writes its section of result.json."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_bisect.errors import printable
from vllm_bisect.report.plot import COLOURS, make_plot
from vllm_bisect.report.sanitize import neutralise
from vllm_bisect.report.section import SectionDoc
from vllm_bisect.report.sections import section_doc
from vllm_bisect.report.view import (
    COMMIT_COLUMNS,
    COMMIT_URL,
    PR_URL,
    SessionReport,
    load,
    pr_number,
    series,
    view,
)

__all__ = ["SessionReport", "html_report", "load", "markdown", "pr_number", "write_reports",
           "write_section"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows)]


def markdown(r: SessionReport) -> str:
    v = view(r)
    lines = ["## vllm-bisect result", ""]
    if v.first_bad:
        if v.search_note:
            lines.append(v.search_note)
        lines.append(f"**{v.first_label}:** [`{v.first_bad[:12]}`]"
                     f"({COMMIT_URL.format(sha=v.first_bad)}) {v.subject}"
                     + (f" ([#{v.pr}]({PR_URL.format(pr=v.pr)}))" if v.pr else ""))
    else:
        lines.append("**Inconclusive:** only commits that could not be tested separate good "
                     "from bad; no single commit is blamed. Candidates:")
        lines += [f"- [`{c[:12]}`]({COMMIT_URL.format(sha=c)})" for c in v.candidates]
    if r.result.culprits:  # one culprit per symptom and step (bisect.multi)
        lines += ["", "**Culprits, per symptom and step:**", "",
                  *(f"- {x.strip()}" if not x.startswith(" ") else f"  - {x.strip()}"
                    for x in r.result.culprit_lines())]
    lines += [f"\nEffect at the first bad commit vs its parent: {e}" for e in v.effects]
    if v.verification:
        text = v.verification
        lines.append("\n" + (text if v.verified else
                             text.replace("Not verified:", "**Not verified**:", 1)))
    if v.model:
        lines.append(f"\n{v.model}.")
    if v.strategy:
        name, _, why = v.strategy.partition(" ")
        lines.append(f"\nVerdict strategy: `{name}` {why}.")
    if v.flaky:
        lines.append(f"\n**Flaky:** {v.flaky}")
    rows = [(row.index, f"`{row.sha[:12]}`", row.subject, *row.cells,
             row.verdict + row.note + (" **(first bad)**" if row.is_culprit else ""))
            for row in v.rows]
    lines += ["", v.summary, "", *_table(COMMIT_COLUMNS, rows)]
    if v.symptoms:
        s = v.symptoms
        lines += ["", s.caption + ":", "", *_table(s.columns, s.rows), ""]
        lines += [f"- `{symptom}` flips {where}" for symptom, where in s.flips]
        lines += [f"- {s.conclusion}"] if s.conclusion else []
        lines += [f"- follow `{symptom}` too (cached measurements are reused): `{cmd}`"
                  for symptom, cmd in s.follow_ups]
    lines += v.studies  # isolate / deps / knobs (vllm_bisect.isolate)
    if v.skips:
        lines += ["", "Skipped (never judged):"]
        for k in v.skips:
            lines.append(f"- `{k.sha[:12]}`: {k.reason}")
            lines += [f"  - cause: `{k.cause.replace('`', chr(39))}`"] if k.cause else []
            lines += [f"  - log: `{k.log}`"] if k.log else []
    if v.environment:
        lines += ["", "<details><summary>Environment</summary>", "", "```json",
                  json.dumps(v.environment, indent=2), "```", "", "</details>"]
    lines += ["", "Reproduce:", "", "```bash", v.reproduce, "```"]
    if v.artifact:
        lines += ["", f"The first bad commit was served from `{v.artifact}`."]
    if v.spec_text:
        lines += ["", "<details><summary>spec.toml</summary>", "", "```toml", v.spec_text,
                  "```", "", "</details>"]
    return neutralise("\n".join(lines) + "\n")


def html_report(r: SessionReport) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("vllm_bisect.report", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    plots = [make_plot("Output tokens, minimum over requests", "tokens",
                       series(r, "output_tokens")),
             make_plot("Inter-token latency (server-counted tokens)", "ms/token",
                       series(r, "itl_ms")),
             make_plot("Decode speed", "tok/s", series(r, "tok_s"))]
    v = view(r)
    return printable(env.get_template("report.html.j2").render(  # (no terminal control)
        v=v, plots=plots, colours=COLOURS, columns=COMMIT_COLUMNS,
        commit_url=COMMIT_URL, pr_url=PR_URL, studies=_studies_html(v.studies)))


def _studies_html(lines: list[str]) -> str:
    """The studies' Markdown as HTML (their tables as tables), one section per study."""
    if not lines:
        return ""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")  # their text is escaped
    out = []
    for ln in lines:
        if ln.startswith("### "):
            ln = "## " + ln[4:]
        elif ln.startswith("<details><summary>"):
            ln = "**" + ln.removeprefix("<details><summary>").removesuffix("</summary>") + "**"
        elif ln == "</details>":
            continue
        out.append(ln)
    return str(md.render("\n".join(out)))


def write_reports(session_dir: Path) -> None:
    """report.md and report.html of the session in ``session_dir``, from its files."""
    r = load(session_dir)
    (session_dir / "report.md").write_text(markdown(r))
    (session_dir / "report.html").write_text(html_report(r))


def _replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, renamed over it (a
    kill mid-write leaves the old file or the new one, never a part)."""
    tmp = path.with_name(f".{path.name}-{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_section(session_dir: Path, key: str, doc: SectionDoc | Mapping[str, Any]) -> None:
    """A study's section (``key``: registered in ``report.sections.STUDY_SECTIONS``, its
    document that section's model; a mapping is validated against it) into the session's
    result.json, then report.md and report.html again; without a result.json (a study of a
    culprit given by hand) into ``<key>.json`` beside it. Each file written atomically.
    ValueError, before anything is written, for a key not registered or a document that is
    not the section's."""
    data = section_doc(key, doc).document()
    path = session_dir / "result.json"
    if not path.exists():
        _replace_text(session_dir / f"{key}.json", json.dumps(data, indent=2))
        return
    res = dict(json.loads(path.read_text()))
    res[key] = data
    _replace_text(path, json.dumps(res, indent=2))
    write_reports(session_dir)
