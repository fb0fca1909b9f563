"""``vllm-bisect watch``: change points in a benchmark series, then (``--bisect``) a bisect of
each reported window."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vllm_bisect.cli.app import VerboseOpt, command, err, out, print_json, setup_logging, user_errors

if TYPE_CHECKING:
    import git

    from vllm_bisect.spec import BisectSpec
    from vllm_bisect.watch.plan import Finding
    from vllm_bisect.watch.render import WindowResult
    from vllm_bisect.watch.series import Series


NO_SPEC = ("no bisect specs written: a window's spec needs what to build and serve. Pass "
           "--spec BASE.toml (build, serve.model, range.repo: your vLLM checkout) to get one "
           "per window, and --bisect to run them")


def _bisect_window(spec: BisectSpec, f: Finding, root: Path, cache_dir: Path | None
                   ) -> WindowResult:
    from vllm_bisect.bisect.state.session import default_cache_dir
    from vllm_bisect.cli.run_cmds import QuietPhases, RichEvents
    from vllm_bisect.errors import FatalError, NotReproduced
    from vllm_bisect.run_bisect import run_bisect
    from vllm_bisect.watch.render import WindowResult

    session = root / f.name / "session"
    try:
        result = run_bisect(spec, session, cache_dir or default_cache_dir(),
                            QuietPhases(RichEvents(err(), spec.range.search.value)))
    except NotReproduced as e:
        return WindowResult(f.name, None, None, f"no repro: {e.message}", str(session))
    except FatalError as e:  # this window cannot be bisected; the others still can
        return WindowResult(f.name, None, None, f"error: {e.message}", str(session))
    subject = None
    if result.first_bad:
        subject = next((c.subject for c in result.range.commits if c.sha == result.first_bad),
                       None)
    return WindowResult(f.name, result.first_bad, subject,
                        "culprit" if result.first_bad else "no single culprit", str(session))


def _session_repo(session: Path) -> git.Repo | None:
    """The repository a session bisected (its stored spec's range.repo); None: gone."""
    from vllm_bisect.bisect.range import open_repo
    from vllm_bisect.bisect.state.session import stored_spec
    from vllm_bisect.errors import BisectError

    try:
        return open_repo(stored_spec(session).range.repo)
    except BisectError:
        return None


def _table(series: Series, findings: list[Finding], commits: dict[str, int | None]) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"change points: {len(series.points)} points ({series.source})")
    for col in ("metric", "change", "last before", "first after", "points between",
                "commits", "size", "confidence"):
        t.add_column(col)
    for f in findings:
        if f.cp.reported:
            n = commits.get(f.name)
            t.add_row(escape(f.metric), f.direction.value,
                      (f.before.commit or f.before.ref)[:12], (f.after.commit or f.after.ref)[:12],
                      str(f.points), "unknown" if n is None else str(n), f"{f.cp.change:+.1%}",
                      f"{f.cp.confidence:.4f}")
    out().print(t)
    for f in findings:
        if not f.cp.reported:
            out().print(f"[dim]not reported: {escape(f.metric)} at point {f.cp.index}: "
                        f"{escape(f.cp.why)}[/]")
    if not any(f.cp.reported for f in findings):
        out().print("no change point outside the series' run-to-run spread")
    elif not any(n is not None for n in commits.values()):
        out().print("[dim]commits: the commits in each window, counted in the vLLM checkout "
                    "(--repo or the spec's range.repo; a session's own); unknown without one[/]")


@command()
def watch(
    series_path: Annotated[Path, typer.Argument(
        metavar="SERIES", help="a directory of `vllm bench serve --save-result` JSON files, a "
                               "session directory, a .csv or a .jsonl export")],
    metric: Annotated[list[str] | None, typer.Option(
        help="metric to watch (repeatable; default: every metric with 4+ points)")] = None,
    repo: Annotated[str | None, typer.Option(
        help="vLLM checkout that resolves the series' commits (default: the spec's range.repo)")
    ] = None,
    spec_path: Annotated[Path | None, typer.Option(
        "--spec", help="base bisect spec (build, serve, repo) for the windows' specs")] = None,
    outdir: Annotated[Path | None, typer.Option(
        "--out", help="where watch.md/html and the windows' specs go (default ./watch)")] = None,
    bisect: Annotated[bool, typer.Option(
        "--bisect", help="bisect every reported window (needs --spec)")] = False,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    min_change: Annotated[float, typer.Option(
        help="never report a relative step under this (on top of the series' spread)")] = 0.02,
    max_pvalue: Annotated[float | None, typer.Option(
        help="change-point significance level (default 0.0001; 0.001 under 20 points)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Find change points in a benchmark series (Apache Otava's E-divisive method), report
    those outside the series' run-to-run spread, and write (with --bisect: run) a bisect spec
    for each window: improvements get a find-the-fix search."""
    from rich.markup import escape

    from vllm_bisect.errors import BisectError, FatalError
    from vllm_bisect.spec import dump_spec, load_spec, parse_spec
    from vllm_bisect.watch.detect import DetectOptions
    from vllm_bisect.watch.plan import find, resolve_points, window_commits, window_spec
    from vllm_bisect.watch.render import (
        WindowResult,
        html_page,
        markdown,
        nonfinite_lines,
        row,
        window_text,
    )
    from vllm_bisect.watch.series import load_series

    setup_logging(verbose)
    root = (outdir or Path("watch")).absolute()
    results: dict[str, WindowResult] = {}
    specs: dict[str, str] = {}
    with user_errors():
        if bisect and spec_path is None:
            raise FatalError("--bisect needs a base spec",
                             hint="pass --spec FILE with the build, serve and range.repo to use")
        base = load_spec(spec_path) if spec_path else parse_spec({}, source="watch")
        if repo:
            base = base.with_overrides(range={"repo": repo})
        series = load_series(series_path)
        for line in nonfinite_lines(series):
            err().print(f"[yellow]warning:[/] {escape(line)}")
        git_repo = None
        if repo or spec_path:
            from vllm_bisect.bisect.range import open_repo

            git_repo = open_repo(base.range.repo)
            if series.source != "session":
                series = resolve_points(series, git_repo)
        elif series.source == "session":   # its own repository counts the windows' commits
            git_repo = _session_repo(Path(str(series.settings["session"])))
        findings = find(series, metric, DetectOptions(max_pvalue=max_pvalue, min_change=min_change))
        commits = {f.name: window_commits(git_repo, f) if git_repo is not None else None
                   for f in findings if f.cp.reported}
        root.mkdir(parents=True, exist_ok=True)
        for f in findings:
            if not f.cp.reported or spec_path is None:
                continue   # (no base spec: a window's spec would serve no real model)
            try:
                spec = window_spec(base, series, f)
            except BisectError as e:  # e.g. a metric no probe measures: said, not raised
                results[f.name] = WindowResult(f.name, None, None, f"no spec: {e.message}")
                continue
            path = root / f"{f.name}.toml"
            path.write_text(dump_spec(spec))
            specs[f.name] = str(path)
            if bisect:
                err().print(f"[bold]bisecting[/] {f.name}: {f.direction.value} "
                            f"{f.cp.change:+.1%}, {window_text(f.points, commits.get(f.name))}")
                results[f.name] = _bisect_window(spec, f, root, cache_dir)
        (root / "watch.md").write_text(markdown(series, findings, results, commits))
        (root / "watch.html").write_text(html_page(series, findings, results, commits))
    if as_json:
        print_json(json.dumps({
            "source": series.source, "points": len(series.points),
            "change_points": [{**row(f, commits.get(f.name)), "spec": specs.get(f.name),
                               "bisect": (results[f.name].__dict__ if f.name in results else None)}
                              for f in findings],
            "spec_note": None if spec_path else NO_SPEC,
            "nonfinite": {m: [{"point": ref, "value": str(v)} for ref, v in bad]
                          for m, bad in series.nonfinite().items()},
            "report": str(root / "watch.md")}))
        return
    _table(series, findings, commits)
    for f in findings:
        r = results.get(f.name)
        if r is None:
            continue
        label = "first fixed commit" if f.direction.value == "improvement" else "first bad commit"
        out().print(f"[bold red]{f.name}:[/] {label} {r.culprit} {escape(r.subject or '')}"
                    if r.culprit else f"{f.name}: {escape(r.note)}")
    for name, spec_file in specs.items():
        if name not in results:
            out().print(f"[dim]spec for {name}: {spec_file}  (bisect it: vllm-bisect run --spec "
                        f"{spec_file})[/]")
    if spec_path is None and commits:
        out().print(NO_SPEC, markup=False)
    out().print(f"report   {root / 'watch.md'}  {root / 'watch.html'}")
