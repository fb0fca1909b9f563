"""``vllm-bisect isolate|deps|knobs``: the commands of the culprit's studies
(:mod:`vllm_bisect.isolate`); the studies and the bisect core are imported when they run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vllm_bisect.cli.app import (
    EXIT_INTERRUPTED,
    EXIT_NOT_REPRODUCED,
    VerboseOpt,
    command,
    err,
    esc,
    out,
    print_json,
    user_errors,
)
from vllm_bisect.cli.app import fail as _fail
from vllm_bisect.cli.app import setup_logging as _setup_logging
from vllm_bisect.errors import BisectError, FatalError, NotReproduced
from vllm_bisect.text import plural

if TYPE_CHECKING:
    from vllm_bisect.isolate.adapter import StudyTrial

SessionArg = Annotated[Path, typer.Argument(help="a bisect session directory")]
CacheOpt = Annotated[Path | None, typer.Option(help="artifact and result cache")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object")]
SessionSpecOpt = Annotated[Path | None, typer.Option("--spec", help="spec (default: the "
                                                     "session's)")]


def _on_trial(t: StudyTrial) -> None:
    from vllm_bisect.report.table import STYLE

    how = "built" if t.fresh else "reused"
    err().print(f"  [{STYLE[t.verdict]}]{t.verdict.value:>4}[/] {esc(t.label[:110])} "
              f"[dim]({how}; {esc(t.reason[:80])})[/]")


def _on_phase(commit: str, phase: str) -> None:
    # a line before each subject tested and each server step (issue 50: a study's builds
    # and servers were silent; calibrating the ends alone started 4 servers with no line)
    who = f"{commit[:12]}: " if commit and commit[:12] not in phase else ""
    err().print(f"[dim]         {who}{esc(phase[:160])}[/]", highlight=False)


def _studies(session: Path, cache_dir: Path | None, *, isolate: bool, deps: bool, hunks: bool,
             spec_path: Path | None, culprit: str | None, index_url: str | None,
             verbose: bool) -> dict[str, dict[str, Any]]:
    from vllm_bisect.bisect.state.session import default_cache_dir, stored_meta
    from vllm_bisect.isolate.studies import run_studies
    from vllm_bisect.spec import load_spec

    _setup_logging(verbose)
    try:
        if cache_dir is None and (session / "journal.sqlite").exists():
            remembered = stored_meta(session, "cache_dir")   # the session's own cache
            cache_dir = Path(remembered) if remembered else None
        spec = load_spec(spec_path) if spec_path else None
        return run_studies(session, cache_dir or default_cache_dir(), isolate=isolate,
                           deps=deps, hunks=hunks, spec=spec, culprit=culprit,
                           index_url=index_url, on_trial=_on_trial, on_phase=_on_phase)
    except KeyboardInterrupt:
        err().print("[yellow]interrupted; every judged subset is journaled.[/] resume with the "
                  "same command")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except NotReproduced as e:
        _fail(e, EXIT_NOT_REPRODUCED)
    except BisectError as e:
        _fail(e)


def _print_strategy(d: dict[str, Any]) -> None:
    if d.get("strategy"):
        out().print(f"[dim]verdict strategy {d['strategy']}: {esc(d.get('strategy_reason', ''))}[/]")


def _print_isolate(d: dict[str, Any]) -> None:
    _print_strategy(d)
    out().print(f"[bold]culprit[/] {d['culprit'][:12]} changes {plural(len(d['files']), 'file')}; "
              f"smallest reproducing set ({d['file_tests']} builds):")
    for f in d["minimal_files"]:
        out().print(f"  [red]{esc(f)}[/]")
    if d["hunk_tests"]:
        out().print(f"hunks ({len(d['minimal_hunks'])} of {len(d['hunks'])}, "
                  f"{d['hunk_tests']} builds):")
        for h in d["minimal_hunks"]:
            out().print(f"  [red]{esc(h)}[/]")
    removes = d["revert_removes"]
    out().print("reverting exactly that set on the culprit: " + (
        "[green]removes the symptom[/]" if removes else "[red]does NOT remove it[/]"
        if removes is False else f"untested ({esc(d['revert_reason'])})"))
    out().print(f"[dim]{d['tests']} subsets judged, {d['fresh_builds']} built this run[/]")


def _print_deps(d: dict[str, Any]) -> None:
    for c in d.get("base_changes") or []:
        out().print(f"base version (Dockerfile): {esc(c)}")
    if d.get("base_note"):
        out().print(f"[yellow]not bisected:[/] {esc(d['base_note'])}")
    if not d["changes"]:
        out().print("the culprit changes no pip-installable dependency pins")
        return
    _print_strategy(d)
    for c in d["changes"]:
        out().print(f"pin: {esc(c)}")
    out().print(f"parent with the culprit's pins: {d['parent_with_new_pins']}")
    out().print(f"culprit with the parent's pins: {d['culprit_with_old_pins']}")
    out().print(f"[bold]conclusion: {esc(d['conclusion'])}[/]")
    for p in d["packages"]:
        for t in p["tested"]:
            out().print(f"  {p['name']}=={t['version']}: {t['verdict']} ({esc(t['reason'])})")
        if p["first_bad_version"]:
            out().print(f"[bold red]first bad {p['name']} version: {p['first_bad_version']}[/]"
                      f" ({p['old']} -> {p['new']})")
        elif p["candidates"]:
            out().print(f"{p['name']}: first bad among {', '.join(p['candidates'])}")
        if p["note"]:
            out().print(f"{p['name']}: {esc(p['note'])}")
    out().print(f"[dim]{d['fresh_builds']} built this run[/]")


@command("isolate")
def isolate_cmd(
    session: SessionArg,
    culprit: Annotated[str | None, typer.Option(help="commit to isolate (default: the "
                                                "session's first bad commit)")] = None,
    spec_path: SessionSpecOpt = None,
    hunks: Annotated[bool, typer.Option(help="go on from files to hunks")] = True,
    deps: Annotated[bool, typer.Option(help="also study changed dependency pins")] = True,
    index_url: Annotated[str | None, typer.Option(help="package index for the dependency "
                                                  "bisect (PEP 503 simple)")] = None,
    cache_dir: CacheOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Which files and hunks of the culprit reproduce the symptom (ddmin on its parent), and
    whether reverting exactly them on the culprit removes it; then its dependency pins."""
    res = _studies(session, cache_dir, isolate=True, deps=deps, hunks=hunks,
                   spec_path=spec_path, culprit=culprit, index_url=index_url, verbose=verbose)
    if as_json:
        print_json(json.dumps(res))
        return
    _print_isolate(res["isolate"])
    if "deps" in res and (res["deps"]["changes"] or res["deps"].get("base_changes")):
        _print_deps(res["deps"])


@command("deps")
def deps_cmd(
    session: SessionArg,
    culprit: Annotated[str | None, typer.Option(help="commit (default: the session's first "
                                                "bad commit)")] = None,
    spec_path: SessionSpecOpt = None,
    index_url: Annotated[str | None, typer.Option(help="PEP 503 simple index (default: "
                                                  "build.install_args' --index-url, else PyPI)")
                         ] = None,
    cache_dir: CacheOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Dependency or vLLM code: swap the culprit's and its parent's pins, then bisect the
    package's versions on the index to the first bad one."""
    res = _studies(session, cache_dir, isolate=False, deps=True, hunks=False,
                   spec_path=spec_path, culprit=culprit, index_url=index_url, verbose=verbose)
    if as_json:
        print_json(json.dumps(res["deps"]))
    else:
        _print_deps(res["deps"])


@command("knobs")
def knobs_cmd(
    spec_path: Annotated[Path, typer.Option("--spec", help="bisect spec (TOML)")],
    knob: Annotated[list[str], typer.Option(
        help="NAME=BASELINE,OTHER... (env) or --flag=BASELINE,OTHER... (serve flag); '-' "
             "unset, '+' flag without value; repeatable")],
    commit: Annotated[list[str] | None, typer.Option(help="commits to test (default: a "
                                                     "bisect session's culprit and its parent, "
                                                     "else range.bad); repeatable")] = None,
    session: Annotated[Path | None, typer.Option(help="session dir (a bisect session adds "
                                                 "the table to its report)")] = None,
    cache_dir: CacheOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Config bisect at a commit: each knob's values one at a time, then ddmin over the
    combination of all of them: which knob flips the symptom."""
    from rich.table import Table

    from vllm_bisect.bisect.state.session import default_cache_dir, new_session_dir
    from vllm_bisect.isolate.knobs import parse_knob
    from vllm_bisect.isolate.studies import default_commits, run_knobs
    from vllm_bisect.report.table import STYLE
    from vllm_bisect.spec import load_spec

    _setup_logging(verbose)
    with user_errors():
        spec = load_spec(spec_path)
        knobs = [parse_knob(k) for k in knob]
        commits = commit or default_commits(session, spec)
        if not commits:
            raise FatalError("no commit given", hint="pass --commit REF or set range.bad")
        session_dir = session or new_session_dir()
        err().print(f"[dim]session {session_dir}  (resume: add --session "
                  f"{shlex.quote(str(session_dir))})[/]")
        doc = run_knobs(session_dir, cache_dir or default_cache_dir(), spec, commits, knobs,
                        _on_trial, _on_phase)
    if as_json:
        print_json(json.dumps(doc))
        return
    style = {v.value: s for v, s in STYLE.items()}
    _print_strategy(doc)
    for t in doc["tables"]:
        table = Table(title=f"knobs at {t['commit'][:12]} (baseline {t['baseline']}: "
                            f"{t['baseline_verdict']})")
        for col in ("knob", "value", "verdict", "flips", "why"):
            table.add_column(col, overflow="fold")
        for r in t["rows"]:
            table.add_row(esc(r["knob"]), esc(r["value"]), f"[{style[r['verdict']]}]{r['verdict']}[/]",
                          {True: "[bold]yes[/]", False: "no", None: "untestable"}[r["flips"]],
                          esc(r["reason"][:70]))
        out().print(table)
        if t["minimal"]:
            out().print("[bold red]flips the symptom:[/] " + esc(", ".join(t["minimal"])))
        else:
            out().print("no knob flips the symptom")
    out().print(f"[dim]{plural(doc['fresh_builds'], 'server')} measured this run[/]")

