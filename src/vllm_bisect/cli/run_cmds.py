"""Commands that bisect: ``run``, ``hook``, ``demo``, ``report``, and their progress lines."""

from __future__ import annotations

import shlex
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vllm_bisect.cli.app import (
    EXIT_INTERRUPTED,
    EXIT_NOT_REPRODUCED,
    VerboseOpt,
    command,
    err,
    esc,
    fail,
    out,
    print_json,
    setup_logging,
    user_errors,
)
from vllm_bisect.errors import BisectError, FatalError, NotReproduced, SpecError
from vllm_bisect.symptoms import keys_text
from vllm_bisect.text import plural

if TYPE_CHECKING:
    from rich.console import Console

    from vllm_bisect.bisect.driver import EventHandler
    from vllm_bisect.bisect.range import CommitInfo, CommitRange
    from vllm_bisect.models import Outcome


class RichEvents:
    """Progress lines on stderr (stdout stays clean for --json)."""

    def __init__(self, console: Console, search: str = "regression",
                 session_line: str | None = None, session: Path | None = None) -> None:
        from vllm_bisect.report.table import verdict_labels

        self.c = console
        self.session_line = session_line   # printed once the session exists
        self.session = session             # a skip's log is shown relative to it
        self.started = time.monotonic()
        self.labels = verdict_labels(search)  # a fix search names its old/new terms

    def on_range(self, rng: CommitRange) -> None:
        from rich.markup import escape

        if self.session_line:
            self.c.print(f"[dim]{escape(self.session_line)}[/]")
        self.c.print(f"[bold]range[/] {rng.good.sha[:12]}..{rng.bad.sha[:12]}: "
                     f"{plural(len(rng.commits), 'commit')}")
        for note in rng.notes:
            self.c.print(f"[yellow]note:[/] {escape(note)}", highlight=False)

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        from vllm_bisect.text import plural, short_subject

        t = time.monotonic() - self.started
        self.c.print(f"[dim]{t:7.1f}s[/] [cyan]{esc(role)}[/] {commit.sha[:12]} "
                     f"{esc(short_subject(commit.subject, 70))} "
                     f"[dim](~{plural(steps_left, 'step')} left)[/]")

    def on_phase(self, commit: str, phase: str) -> None:
        # (parallel workers interleave: name the commit)
        self.c.print(f"[dim]          {commit[:12] + ': ' if commit else ''}{esc(phase)}[/]")

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        from vllm_bisect.models import Verdict
        from vllm_bisect.report.table import STYLE

        cached = " [dim](cached)[/]" if outcome.from_cache else ""
        self.c.print(f"          -> {commit.sha[:12]} [{STYLE[outcome.verdict]}]"
                     f"{self.labels.get(outcome.verdict.value, outcome.verdict.value)}[/]: "
                     f"{esc(outcome.reason)}{cached}")
        if outcome.verdict is Verdict.SKIP:
            self._skip_cause(outcome)

    def _skip_cause(self, outcome: Outcome) -> None:
        """The error line of a skip's log (its reason names only what failed) and the log,
        as report.md shows them."""
        from vllm_bisect.report.cause import cause_line, session_path

        cause = cause_line(outcome.log_tail)
        if cause:
            self.c.print(f"             cause: {esc(cause)}", highlight=False)
        if outcome.log is not None:
            log = (session_path(outcome.log, self.session) if self.session is not None
                   else str(outcome.log))
            self.c.print(f"[dim]             log: {esc(log or '')}[/]", highlight=False)


class QuietPhases:
    """Another handler's events without the per-commit phase lines (the demo's short
    output); the notes about the whole run are kept."""

    def __init__(self, inner: EventHandler) -> None:
        self.inner = inner

    def on_range(self, rng: CommitRange) -> None:
        self.inner.on_range(rng)

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        self.inner.on_testing(commit, role, steps_left)

    def on_phase(self, commit: str, phase: str) -> None:
        if not commit:  # a note about the whole run (why a commit runs again, the strategy)
            self.inner.on_phase(commit, phase)

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        self.inner.on_outcome(commit, outcome)


def summary(session_dir: Path, console: Console) -> None:
    """The result table, the culprit (or the candidates), the counts and where it all is:
    from the session's result.json (the one result model)."""
    from vllm_bisect.report.result import BisectReport
    from vllm_bisect.report.table import result_table
    from vllm_bisect.report.view import starts_text

    result = BisectReport.read(session_dir / "result.json")
    console.print(result_table(result))
    if result.first_bad:
        if result.search == "fix":
            console.print("[dim]find-the-fix search: old = has the problem, new = fixed[/]")
        console.print(f"[bold red]{result.first_new_label}:[/] {result.first_bad} "
                      f"{esc(result.first_bad_subject or '')}")
        console.print(f"  https://github.com/vllm-project/vllm/commit/{result.first_bad}")
        for effect in result.effects or []:
            console.print(f"effect: {esc(effect.text)}", highlight=False)
    if result.culprits:  # one culprit per symptom and step (verdict.symptoms, rest check)
        for line in result.culprit_lines():
            console.print(esc(line), highlight=False)
    if not result.first_bad:
        console.print("[yellow]no single culprit: only skipped commits separate good from bad."
                      "[/] candidates:")
        for c in result.candidates:
            console.print(f"  {c}")
    par = (f", {plural(result.rounds, 'round')} on {result.workers} workers" if result.workers > 1
           else "")
    console.print(f"[dim]{plural(len(result.judged()), 'commit')} judged, "
                  f"{starts_text(result)}{par}, "
                  f"{result.wall_s:.1f} s[/]")
    if result.model:
        console.print(esc(result.model.text(result.first_bad)), highlight=False)
    if result.strategy_chosen:
        console.print(f"[dim]verdict strategy {result.strategy_chosen}: "
                      f"{esc(result.strategy_reason)}[/]")
    if result.flaky:
        console.print(f"[yellow]flaky:[/] {esc(result.flaky.text())}")
    console.print(f"session  {session_dir}")
    for name in ("report.md", "report.html"):
        if (session_dir / name).exists():
            console.print(f"report   {session_dir / name}")


def _resources(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    res = {}
    for item in items:
        name, sep, amount = item.partition("=")
        try:
            res[name.strip()] = float(amount) if sep else 1.0
        except ValueError:
            raise SpecError(f"--ray-resource {item!r}: the amount is not a number",
                            hint="use NAME=AMOUNT, e.g. --ray-resource arch_aarch64=1") from None
    return res


def _resume_command(session_dir: Path, cache_dir: Path | None) -> str:
    cmd = f"vllm-bisect run --session {shlex.quote(str(session_dir))}"
    if cache_dir is not None:
        cmd += f" --cache-dir {shlex.quote(str(cache_dir))}"
    return cmd


@command()
def run(
    spec_path: Annotated[Path | None, typer.Option("--spec", help="bisect spec (TOML)")] = None,
    good: Annotated[str | None, typer.Option(help="last known good ref")] = None,
    bad: Annotated[str | None, typer.Option(help="first known bad ref")] = None,
    repo: Annotated[str | None, typer.Option(help="vLLM checkout (range.repo)")] = None,
    session: Annotated[Path | None, typer.Option(help="session dir (resumes if it exists)")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    symptom: Annotated[str | None, typer.Option(
        help=f"verdict.symptom: {keys_text()}")] = None,
    itl_factor: Annotated[float | None, typer.Option(help="verdict.itl_factor")] = None,
    workers: Annotated[int | None, typer.Option(
        help="commits tested at once (parallel.workers; without --gpus: simulator/CPU workers)")
    ] = None,
    gpus: Annotated[str | None, typer.Option(
        help="GPUs to spread probes over: 0,1,2,3 or auto (parallel.gpus)")] = None,
    gpus_per_probe: Annotated[int | None, typer.Option(
        help="GPUs per probe, for tensor parallel (parallel.gpus_per_probe)")] = None,
    executor: Annotated[str | None, typer.Option(help="local or ray (parallel.executor)")] = None,
    search: Annotated[str | None, typer.Option(
        help="range.search: regression (good..bad, find the first bad commit) or fix (--good "
             "has the problem, --bad is fixed; find the first fixed commit)")] = None,
    ray_address: Annotated[str | None, typer.Option(
        help="Ray cluster: auto or ray://host:port (parallel.ray_address)")] = None,
    ray_resource: Annotated[list[str] | None, typer.Option(
        help="custom Ray resource per probe, NAME=AMOUNT (e.g. arch_aarch64=1); repeatable")
    ] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="start --session over when it was started with another spec (the "
                        "earlier run is moved into replaced-<time>/ inside it)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Bisect a range: verify both endpoints, then binary (or, with several workers,
    multi-way) search to the first bad commit."""
    from vllm_bisect.bisect.state.session import (
        claim,
        default_cache_dir,
        new_session_dir,
        stored_meta,
        stored_spec,
        usable_cache_dir,
    )
    from vllm_bisect.run_bisect import run_bisect
    from vllm_bisect.spec import load_spec

    setup_logging(verbose)
    session_dir = session or new_session_dir()
    if cache_dir is not None:  # remembered by the session: absolute, whatever the next cwd
        cache_dir = cache_dir.absolute()
    try:
        stored = (session_dir / "journal.sqlite").exists()
        if cache_dir is None and stored:  # a resume uses the cache dir the session started with
            remembered = stored_meta(session_dir, "cache_dir")
            cache_dir = Path(remembered) if remembered else None
        if spec_path is not None:
            spec = load_spec(spec_path)
        elif stored:
            spec = stored_spec(session_dir)
        else:
            raise FatalError("no spec given", hint="pass --spec FILE (or --session DIR of an "
                             "earlier run to resume it)")
        spec = spec.with_overrides(range={"good": good, "bad": bad, "repo": repo,
                                          "search": search},
                                   verdict={"symptom": symptom, "itl_factor": itl_factor},
                                   parallel={"workers": workers, "gpus": gpus,
                                             "gpus_per_probe": gpus_per_probe,
                                             "executor": executor, "ray_address": ray_address,
                                             "ray_resources": _resources(ray_resource)})
        # never another directory, nor another bisect (a new one is made by the run)
        claim(session_dir, spec, force=force, create=False)
        line = f"session {session_dir}  (resume: {_resume_command(session_dir, cache_dir)})"
        err().print(f"[dim]{esc(spec.ops.deadline_text(spec.probe.sent_max_tokens()))}[/]")
        run_bisect(spec, session_dir, usable_cache_dir(cache_dir or default_cache_dir()),
                   RichEvents(err(), spec.range.search.value, session_line=line,
                              session=session_dir))
    except KeyboardInterrupt:
        if (session_dir / "journal.sqlite").exists():
            err().print("[yellow]interrupted; nothing recorded is lost.[/] resume with: "
                        f"{esc(_resume_command(session_dir, cache_dir))}")
        else:
            err().print("[yellow]interrupted before the session started[/] (nothing to resume)")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except NotReproduced as e:
        fail(e, EXIT_NOT_REPRODUCED)
    except BisectError as e:
        fail(e)
    from vllm_bisect.cli.explain_cmds import after_run

    if as_json:  # (with explain.profile, the JSON holds the explain key)
        after_run(spec, session_dir, cache_dir, quiet=True)
        print_json(_result_doc(session_dir))
    else:
        summary(session_dir, out())
        after_run(spec, session_dir, cache_dir, quiet=False)


def _result_doc(session_dir: Path) -> str:
    """The finished session's result.json (the one result model, as written)."""
    return (session_dir / "result.json").read_text()


class ReportFormat(StrEnum):
    MD = "md"
    HTML = "html"
    JSON = "json"


@command()
def report(
    session: Annotated[Path, typer.Argument(help="a session directory")],
    fmt: Annotated[ReportFormat, typer.Option("--format", help="md, html or json")] = ReportFormat.MD,
) -> None:
    """Print a finished session's report (Markdown to paste into a GitHub issue, HTML, JSON)."""
    from vllm_bisect.report.render import html_report, load, markdown

    try:
        r = load(session)
    except BisectError as e:
        fail(e)
    if fmt is ReportFormat.JSON:
        print_json(r.result.model_dump_json())
    else:
        sys.stdout.write(markdown(r) if fmt is ReportFormat.MD else html_report(r))


@command()
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    workdir: Annotated[Path | None, typer.Option(
        help="put the history and session here (default: a new temporary directory)")] = None,
    workers: Annotated[int, typer.Option(help="commits tested at once (simulator workers)")] = 1,
) -> None:
    """Bisect an embedded synthetic vLLM history with a planted 128-token cap (no GPU).
    The history and the session are kept; the summary says where."""
    import json
    import tempfile

    from vllm_bisect.demo import make_demo
    from vllm_bisect.run_bisect import run_bisect

    setup_logging(False)
    started = time.monotonic()
    root = workdir or Path(tempfile.mkdtemp(prefix="vllm-bisect-demo-"))
    session_dir = root / "session"
    with user_errors(1):
        d = make_demo(root)
        err().print(f"[bold]demo:[/] synthetic vLLM history at {d.history.path} "
                    f"({len(d.history.shas) - 1} commits after the good base); planted "
                    f"128-token cap under MTP at {d.history.planted['length'][:12]}, "
                    f"{len(d.history.unbuildable)} unbuildable commits")
        spec = d.spec.with_overrides(parallel={"workers": workers}) if workers > 1 else d.spec
        result = run_bisect(spec, session_dir, root / "cache",
                            QuietPhases(RichEvents(err(), spec.range.search.value,
                                                   session=session_dir)))
    planted = d.history.planted["length"]
    if as_json:
        doc = json.loads(_result_doc(session_dir))
        doc.update(planted=planted, unbuildable=list(d.history.unbuildable),
                   found_planted=result.first_bad == planted, session=str(session_dir),
                   demo_wall_s=round(time.monotonic() - started, 2))
        print_json(json.dumps(doc))
    else:
        summary(session_dir, out())
        ok = result.first_bad == planted
        out().print(("[green]found the planted regression[/]" if ok
                     else "[red]did NOT find the planted regression[/]") +
                    f" in {time.monotonic() - started:.1f} s")
    err().print(f"[dim]demo kept in {root} (history, session, cache): rm -r "
                f"{shlex.quote(str(root))} when done[/]")
    if result.first_bad != planted:
        raise typer.Exit(1)
