"""What a report says, independent of its format: report.md and report.html both render a
:class:`ReportView` built from the session's :class:`~vllm_bisect.report.result.BisectReport`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_bisect.errors import SessionError
from vllm_bisect.models import Measurement, Phase, Verdict
from vllm_bisect.report.result import (
    BisectReport,
    JudgedCommit,
    PerRequest,
    VerificationDoc,
)
from vllm_bisect.report.sections import study_lines
from vllm_bisect.report.symptom_view import SymptomView, session_spec, symptom_view
from vllm_bisect.text import plural, seconds

COMMIT_URL = "https://github.com/vllm-project/vllm/commit/{sha}"
PR_URL = "https://github.com/vllm-project/vllm/pull/{pr}"
PR_IN_SUBJECT = re.compile(r"\(#(\d+)\)\s*$")
COMMIT_COLUMNS = ("#", "commit", "subject", "output tokens", "ITL ms/token", "chunk ITL ms",
                  "tokens/chunk", "acceptance", "verdict")


@dataclass(frozen=True)
class SkipView:
    """A commit never judged: its reason, the error line of its log (``cause``), and that
    log's path (relative to the session directory when inside it)."""

    sha: str
    reason: str
    cause: str | None
    log: str | None
    log_href: str | None = None   # the log as a link from report.html (in the session dir)


def skip_view(p: JudgedCommit, session: Path) -> SkipView:
    from urllib.parse import quote

    from vllm_bisect.report.cause import session_path

    reason = p.reason
    if p.log and reason.endswith(f" (log: {p.log})"):  # the log is shown on its own
        reason = reason[:-len(f" (log: {p.log})")]
    log = session_path(p.log, session)
    href = None if log is None else (Path(log).as_uri() if Path(log).is_absolute()
                                     else quote(log))
    return SkipView(p.commit, reason, p.cause, log, href)


@dataclass(frozen=True)
class SessionReport:
    session: Path
    result: BisectReport
    spec_text: str


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
    return SessionReport(session, BisectReport.read(res),
                         spec.read_text() if spec.exists() else "")


def pr_number(subject: str | None) -> str | None:
    m = PR_IN_SUBJECT.search(subject or "")
    return m.group(1) if m else None


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def tokens(m: Measurement | None) -> str:
    outs = m.output_tokens if m else []
    return "-" if not outs else (str(min(outs)) if min(outs) == max(outs)
                                 else f"{min(outs)}..{max(outs)}")


@dataclass(frozen=True)
class CommitRow:
    index: str
    sha: str
    subject: str
    cells: tuple[str, ...]   # output tokens .. acceptance
    verdict: str
    is_culprit: bool
    note: str = ""           # " (first judged bad)": the final verdict is not the first


@dataclass(frozen=True)
class ReportView:
    first_bad: str | None
    first_label: str         # "First bad commit", or "First fixed commit" (a fix search)
    search_note: str | None  # a fix search says what its terms mean
    subject: str
    pr: str | None
    subject_plain: str       # without the trailing "(#PR)" (linked separately)
    candidates: list[str]
    effects: list[str]
    verification: str | None
    verified: bool
    model: str | None        # changepoint: P of the culprit, the step and its interval
    posterior: list[tuple[float, float]]   # (x in 0..1 along the range, P): the model's bars
    strategy: str | None     # the verdict strategy auto chose, and why
    flaky: str | None        # the symptom came and went: said, with the setting to use
    summary: str
    rows: list[CommitRow]
    symptoms: SymptomView | None
    skips: list[SkipView]
    environment: dict[str, Any] | None
    reproduce: str
    artifact: str | None
    spec_text: str
    studies: list[str]       # the culprit's studies (isolate, deps, knobs), Markdown lines


def view(r: SessionReport) -> ReportView:
    res = r.result
    judged = res.judged()
    rows = [CommitRow(str(p.index if p.index is not None else "?"), p.commit,
                      p.subject or "", _cells(p.measurement), p.verdict.value,
                      p.commit == res.first_bad, p.moved())
            for p in judged]
    culprit = res.culprit()
    fix = res.search == "fix"
    return ReportView(
        first_bad=res.first_bad, subject=res.first_bad_subject or "",
        first_label="First fixed commit" if fix else "First bad commit",
        search_note="Find-the-fix search: old = has the problem, new = fixed." if fix else None,
        pr=pr_number(res.first_bad_subject), candidates=list(res.candidates),
        subject_plain=PR_IN_SUBJECT.sub("", res.first_bad_subject or "").rstrip(),
        effects=effects(r), verification=verification_text(res),
        verified=bool(res.verification and res.verification.confirmed),
        model=res.model.text(res.first_bad) if res.model else None,
        posterior=([(k / max(res.n_commits - 1, 1), p) for k, p in res.model.posterior]
                   if res.model else []),
        strategy=(f"{res.strategy_chosen} ({res.strategy_reason or ''})"
                  if res.strategy_chosen else None),
        flaky=res.flaky.text() if res.flaky else None,
        summary=(f"Range {res.good[:12]} (good) .. {res.bad[:12]} (bad), "
                 f"{plural(res.n_commits, 'commit')}; {len(judged)} judged, {starts_text(res)}, "
                 f"{seconds(res.wall_s)}."),
        rows=rows, symptoms=symptom_view(res, r.spec_text),
        skips=[skip_view(p, r.session) for p in judged if p.verdict is Verdict.SKIP],
        environment=next((p.environment for p in judged if p.environment), None),
        reproduce=f"vllm-bisect run --spec spec.toml --good {res.good[:12]} --bad {res.bad[:12]}",
        artifact=culprit.artifact if culprit else None, spec_text=r.spec_text.strip(),
        studies=study_lines(res.model_dump(mode="json")))


def _cells(m: Measurement | None) -> tuple[str, ...]:
    if m is None:
        return (tokens(m), "-", "-", "-", "-")
    return (tokens(m), fmt(m.itl_ms), fmt(m.chunk_itl_ms), fmt(m.tokens_per_chunk),
            fmt(m.acceptance_length))


def effects(r: SessionReport) -> list[str]:
    """Culprit vs its last good parent, per metric, each with its interval and what it
    rests on: result.json's ``effects`` (worked out when it was written), else worked out
    now (report/effects.py)."""
    from vllm_bisect.report.effects import effect_docs

    docs = r.result.effects
    if docs is None:
        docs = effect_docs(r.result, session_spec(r.spec_text).verdict)
    return [e.text for e in docs]


def requests_text(v: VerificationDoc) -> str:
    """How many requests the verification holds (what result.json has, not what was asked)."""
    def n(pr: PerRequest | None) -> int | None:
        return None if pr is None else len(pr.output_tokens)

    c, p = n(v.culprit_per_request), n(v.parent_per_request)
    if c is None or p is None:
        return f"{v.samples} requests asked for each"
    word = "request" if c == 1 else "requests"
    return f"{c} {word} each" if c == p else f"{c} requests on the culprit, {p} on its parent"


def starts_text(res: BisectReport) -> str:
    """Every server start of the session by phase, beside plain ``git bisect run``'s."""
    by = res.starts_by_phase
    total = res.server_starts
    parts = [f"{p.value} {by[p.value]}" for p in Phase if by.get(p.value)]
    plain = (f"; plain git bisect run: ~{res.plain_bisect_starts}, one a step"
             if res.plain_bisect_starts else "")
    calls = f" over {res.calls} calls" if res.calls > 1 else ""
    word = "server start" if total == 1 else "server starts"
    return f"{total} {word}{calls}" + (f" ({', '.join(parts)}{plain})" if parts or plain
                                       else "")


def servers_text(n: int) -> str:
    return f"{n} server" + ("" if n == 1 else "s")


def _runs(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def verification_text(res: BisectReport) -> str | None:
    v = res.verification
    if v is None:
        return None
    if v.source == "confirmation":
        return (f"Verified at the whole-bisect bound by the search's confirmation of the final "
                f"pair, with no fresh server: the culprit bad on "
                f"{servers_text(v.culprit_servers)} ({v.culprit_reason}) and its parent "
                f"{v.parent[:12]} good on {servers_text(v.parent_servers)} "
                f"({v.parent_reason}).")
    if v.source == "rechecks":
        return (f"Verified by the search's own runs, with no fresh server: the culprit showed "
                f"the symptom in {_runs(v.culprit_servers)} "
                f"({v.culprit_reason}; a commit that shows a cap is bad: a good one never "
                f"does) and its parent {v.parent[:12]} missed it in all "
                f"{_runs(v.parent_servers)}, the search's and "
                f"its re-checks ({v.parent_reason}).")
    if v.confirmed:
        return (f"Verified: re-measured on fresh servers ({requests_text(v)}), the "
                f"culprit again judged bad ({v.culprit_reason}) and its parent "
                f"{v.parent[:12]} good ({v.parent_reason}).")
    return (f"Not verified: re-measured with {requests_text(v)}, the culprit judged "
            f"{v.culprit_verdict.value} ({v.culprit_reason}) and its parent {v.parent[:12]} "
            f"{v.parent_verdict.value} ({v.parent_reason}). The symptom may be flaky: rerun "
            "with more samples (verdict.strategy = \"sequential\").")


def series(r: SessionReport, key: str) -> list[tuple[int, float | None, str, bool]]:
    """(commit index, value, verdict, is culprit) per judged commit, for a plot."""
    pts = []
    for p in r.result.judged():
        m = p.measurement
        v: float | None
        if m is None:
            v = None
        elif key == "output_tokens":
            v = float(min(m.output_tokens)) if m.output_tokens else None
        elif key == "tok_s":
            v = 1000.0 / m.itl_ms if m.itl_ms else None
        else:
            v = m.itl_ms
        pts.append((p.index or 0, v, p.verdict.value, p.commit == r.result.first_bad))
    return pts
