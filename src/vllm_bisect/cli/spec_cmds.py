"""``vllm-bisect spec --keys``: every spec key with its type, default and help; and
``vllm-bisect sim history DIR``: a synthetic vLLM history to try the tool on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_bisect.cli.app import app, command, esc, out, typer_app, user_errors


@command("spec")
def spec_cmd(
    keys: Annotated[bool, typer.Option("--keys", help="list every spec key (type, default, "
                                                      "help)")] = False,
    section: Annotated[str | None, typer.Argument(
        help="only this section (range, build, serve, probe, verdict, ops, parallel)")] = None,
) -> None:
    """Spec file reference: `vllm-bisect spec --keys [SECTION]`."""
    import textwrap

    from vllm_bisect.spec import BisectSpec
    from vllm_bisect.spec.keys import spec_keys

    if not keys:
        out().print("pass --keys to list every spec key (optionally one SECTION)")
        raise typer.Exit(0)
    rows = [k for k in spec_keys(BisectSpec) if section is None or k.key.split(".", 1)[0] == section]
    if not rows:
        sections = sorted({k.key.split(".", 1)[0] for k in spec_keys(BisectSpec)})
        out().print(f"no section {esc(section)}; sections: {', '.join(sections)}")
        raise typer.Exit(2)
    width = max(40, out().width - 1)
    for k in rows:
        kinds = f"  [dim](build.kind: {', '.join(k.kinds)})[/]" if k.kinds else ""
        out().print(f"[bold]{esc(k.key)}[/]: {esc(k.type)} = {esc(k.default)}{kinds}",
                    soft_wrap=True)
        if k.help:   # wrapped under its key, never back at the margin (issue 50)
            out().print(esc(textwrap.fill(k.help, width, initial_indent="    ",
                                          subsequent_indent="    ", break_on_hyphens=False)),
                        soft_wrap=True)


sim_app = typer_app("The bundled simulator: synthetic vLLM histories to try vllm-bisect on.")
app.add_typer(sim_app, name="sim")


@command("history", on=sim_app)
def sim_history(
    path: Annotated[Path, typer.Argument(help="new directory for the git repository")],
    commits: Annotated[int, typer.Option(help="commits after the good base")] = 30,
    cap_at: Annotated[int | None, typer.Option(
        help="plant a 128-token output cap (with speculative decoding) at this commit")] = None,
    slow_at: Annotated[int | None, typer.Option(
        help="plant a decode slowdown (slow_factor x) at this commit")] = None,
    slow_factor: Annotated[float, typer.Option(help="the slowdown's factor")] = 7.0,
    unbuildable: Annotated[list[int] | None, typer.Option(
        help="a commit that fails to build (repeat the option for more)")] = None,
    seed: Annotated[int, typer.Option(help="random seed of the filler commits")] = 0,
    study: Annotated[str | None, typer.Option(
        help="instead, the history of a study after the bisect: isolate (a 20-file culprit), "
             "deps (a commit bumping pins; a local package index beside it) or knobs (a "
             "serve flag that caps outputs)")] = None,
) -> None:
    """Make a synthetic vLLM git history with planted regressions, write a spec for it to
    PATH-spec.toml, and print the commands that bisect it."""
    from vllm_bisect.errors import FatalError

    with user_errors():
        if path.exists() and any(path.iterdir()):
            raise FatalError(f"{path} exists and is not empty", hint="pick a new directory")
        spec = path.parent / f"{path.name}-spec.toml"
        session = path.parent / f"{path.name}-session"
        if study is not None:
            commands = _study(study, path, spec)
        else:
            commands = _planted(path, spec, commits, cap_at, slow_at, slow_factor,
                                tuple(unbuildable or ()), seed)
    out().print(f"spec written to {spec}", markup=False)
    for i, cmd in enumerate(commands):
        out().print(f"{'next' if i == 0 else 'then'}: "
                    + cmd.format(spec=spec, session=session), markup=False, soft_wrap=True)


def _study(study: str, path: Path, spec: Path) -> tuple[str, ...]:
    from vllm_bisect.errors import FatalError
    from vllm_bisect.sim.study_history import STUDIES, study_history
    from vllm_bisect.spec import dump_spec, parse_spec

    if study not in STUDIES:
        raise FatalError(f"--study {study!r} is not a study history",
                         hint=f"use one of: {', '.join(STUDIES)}")
    s = study_history(study, path)
    for what, sha in s.history.planted.items():
        out().print(f"planted {what} at {sha}", markup=False)
    spec.write_text(dump_spec(parse_spec(s.spec, source=f"sim history --study {study}")))
    return s.commands


def _planted(path: Path, spec: Path, commits: int, cap_at: int | None, slow_at: int | None,
             slow_factor: float, unbuildable: tuple[int, ...], seed: int) -> tuple[str, ...]:
    from vllm_bisect.errors import FatalError
    from vllm_bisect.sim.history import HistoryPlan, generate_history, sim_path

    for name, at in (("--cap-at", cap_at), ("--slow-at", slow_at)):
        if at is not None and not 1 <= at <= commits:
            raise FatalError(f"{name} {at} is outside 1..{commits}")
    if cap_at is None and slow_at is None:
        cap_at = max(1, commits * 2 // 3)
    h = generate_history(path, HistoryPlan(
        n_commits=commits, cap_at=cap_at, slow_at=slow_at, slow_factor=slow_factor,
        unbuildable=unbuildable, seed=seed))
    symptom = "length" if cap_at is not None else "itl"
    for what, sha in h.planted.items():
        out().print(f"planted {what} at {sha}", markup=False)
    spec.write_text(
        f'[range]\nrepo = "{path.resolve()}"\ngood = "{h.good}"\nbad = "{h.bad}"\n\n'
        '[build]\nkind = "source"\n\n'
        f'[serve]\nmodel = "sim-model"\nenv = {{ VLLM_BISECT_SIM_PATH = "{sim_path()}" }}\n'
        'speculative = { method = "mtp", num_speculative_tokens = 3 }\n\n'
        '[probe]\nmax_tokens = 160\nrequests = 2\n\n'
        f'[verdict]\nsymptom = "{symptom}"\n')
    return ("vllm-bisect run --spec {spec} --session {session}",)
