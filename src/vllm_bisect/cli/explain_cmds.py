"""``vllm-bisect explain SESSION``: why the culprit is slower (:mod:`vllm_bisect.explain`):
its torch profile against its parent's, and the two endpoints' environments side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from vllm_bisect.cli.app import VerboseOpt, command, err, out, print_json, setup_logging, user_errors
from vllm_bisect.symptoms import Symptom
from vllm_bisect.text import plural

SessionArg = Annotated[Path, typer.Argument(help="a finished bisect session directory")]


def _cache_dir(session: Path, given: Path | None) -> Path:
    from vllm_bisect.bisect.state.session import default_cache_dir, stored_meta

    if given is not None:   # absolute (see cli.app.one_commit)
        return given.expanduser().resolve()
    remembered = stored_meta(session, "cache_dir") if (session / "journal.sqlite").exists() \
        else None
    return Path(remembered) if remembered else default_cache_dir()


def run_explain(session: Path, cache_dir: Path | None, servers_per_side: int | None,
                culprit: str | None = None, spec_path: Path | None = None,
                against_path: Path | None = None) -> dict[str, Any]:
    """Profile and diff (progress on stderr); the ``explain`` document. With ``spec_path``
    and ``culprit`` no bisect is needed: SESSION is made (or reused) to hold the traces.
    With ``against_path``: the culprit under the spec against the culprit under that one."""
    from vllm_bisect.bisect.state.session import stored_spec
    from vllm_bisect.errors import FatalError
    from vllm_bisect.explain.run import explain_session
    from vllm_bisect.spec import load_spec

    spec = load_spec(spec_path) if spec_path is not None else None
    if against_path is not None and not against_path.is_file():
        raise FatalError(f"the --against spec {against_path} does not exist",
                         hint="pass the spec of the second setup (the same commit served "
                              "another way) as an existing TOML file")
    against = load_spec(against_path) if against_path is not None else None
    bisected = (session / "journal.sqlite").exists()
    if spec is None and not bisected:
        raise FatalError(f"{session} is not a bisect session (no journal.sqlite)",
                         hint="explain follows a finished `vllm-bisect run --session DIR`; "
                              "or pass --spec FILE --culprit REF to profile REF against its "
                              "parent without a bisect")
    if spec is not None and culprit is None and not bisected:
        raise FatalError(f"{session} holds no bisect, so it names no culprit",
                         hint="pass --culprit REF (profiled against its first parent)")
    if spec is not None:
        session.mkdir(parents=True, exist_ok=True)
    k = servers_per_side or (spec or stored_spec(session)).explain.servers_per_side
    what = f"the commit under {spec_path or 'the session spec'} and under {against_path}" \
        if against is not None else "the culprit and its parent"
    err().print(f"[bold]explain:[/] profiling {what}, {plural(k, 'server')} each", soft_wrap=True)
    return explain_session(session, _cache_dir(session, cache_dir), k,
                           on_phase=lambda msg: err().print(f"[dim]  {msg}[/]"),
                           culprit_ref=culprit, spec=spec, against=against)


def print_explain(doc: dict[str, Any], session: Path) -> None:
    from rich.markup import escape

    from vllm_bisect.explain.report_section import explain_lines

    for line in explain_lines(doc):
        out().print(escape(line), highlight=False)
    out().print(f"\nreport   {session / 'report.md'}")


@command("explain")
def explain_cmd(
    session: SessionArg,
    servers_per_side: Annotated[int | None, typer.Option(
        min=1, max=8, help="profiled servers per side (default: the spec's "
                           "explain.servers_per_side, 2)")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    culprit: Annotated[str | None, typer.Option(
        help="explain this commit against its parent (default: the session's culprit)")
    ] = None,
    spec_path: Annotated[Path | None, typer.Option(
        "--spec", help="spec to build and serve with (default: the session's); with "
                       "--culprit, SESSION need not hold a bisect")] = None,
    against: Annotated[Path | None, typer.Option(
        help="a second spec: profile the culprit under --spec (or the session's) against "
             "the same commit under this one (two setups, e.g. eager against CUDA graphs), "
             "instead of against its parent")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Why is the culprit slower? Profile it and its parent with vLLM's torch profiler
    (2 servers each), diff the kernels, host ops and idle gaps per decode step, and compare
    the two endpoints' packages and VLLM_* variables."""
    setup_logging(verbose)
    with user_errors():
        doc = run_explain(session, cache_dir, servers_per_side, culprit, spec_path, against)
    if as_json:
        print_json(json.dumps(doc))
    else:
        print_explain(doc, session)


# the symptoms whose culprit `explain` profiles (the symptoms' registry: a speed)
SPEED_SYMPTOMS = tuple(s.value for s in Symptom if s.info.speed)


def after_run(spec: Any, session: Path, cache_dir: Path | None, quiet: bool) -> None:
    """The end of ``run``: explain the culprit now (``explain.profile = true``), else offer
    it for the speed symptoms. A failed explain leaves the bisect's result as it is."""
    import shlex

    from vllm_bisect.errors import BisectError

    doc = json.loads((session / "result.json").read_text()) if (
        session / "result.json").exists() else {}
    if not doc.get("first_bad"):
        return
    if spec.explain.profile:
        try:
            found = run_explain(session, cache_dir, None)
        except BisectError as e:
            err().print(f"[yellow]explain failed:[/] {e.message}" +
                        (f" ({e.hint})" if e.hint else ""))
            return
        if not quiet:
            print_explain(found, session)
    elif str(spec.verdict.symptom) in SPEED_SYMPTOMS:
        err().print("[dim]why is it slower? profile the culprit against its parent (4 server "
                    f"starts): vllm-bisect explain {shlex.quote(str(session))}[/]",
                    soft_wrap=True)  # the command stays on one line, to copy
