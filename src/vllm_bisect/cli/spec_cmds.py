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
    from vllm_bisect.spec import BisectSpec
    from vllm_bisect.spec_keys import spec_keys

    if not keys:
        out().print("pass --keys to list every spec key (optionally one SECTION)")
        raise typer.Exit(0)
    rows = [k for k in spec_keys(BisectSpec) if section is None or k.key.split(".", 1)[0] == section]
    if not rows:
        sections = sorted({k.key.split(".", 1)[0] for k in spec_keys(BisectSpec)})
        out().print(f"no section {esc(section)}; sections: {', '.join(sections)}")
        raise typer.Exit(2)
    for k in rows:
        kinds = f"  [dim](build.kind: {', '.join(k.kinds)})[/]" if k.kinds else ""
        out().print(f"[bold]{esc(k.key)}[/]: {esc(k.type)} = {esc(k.default)}{kinds}")
        if k.help:
            out().print(f"    {esc(k.help)}")


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
) -> None:
    """Make a synthetic vLLM git history with planted regressions, and print a spec for it."""
    from vllm_bisect.errors import FatalError
    from vllm_bisect.sim.history import HistoryPlan, generate_history, sim_path

    with user_errors():
        if path.exists() and any(path.iterdir()):
            raise FatalError(f"{path} exists and is not empty", hint="pick a new directory")
        for name, at in (("--cap-at", cap_at), ("--slow-at", slow_at)):
            if at is not None and not 1 <= at <= commits:
                raise FatalError(f"{name} {at} is outside 1..{commits}")
        if cap_at is None and slow_at is None:
            cap_at = max(1, commits * 2 // 3)
        h = generate_history(path, HistoryPlan(
            n_commits=commits, cap_at=cap_at, slow_at=slow_at, slow_factor=slow_factor,
            unbuildable=tuple(unbuildable or ()), seed=seed))
    symptom = "length" if cap_at is not None else "itl"
    for what, sha in h.planted.items():
        out().print(f"planted {what} at {sha}", markup=False)
    spec = path.parent / f"{path.name}-spec.toml"
    spec.write_text(
        f'[range]\nrepo = "{path.resolve()}"\ngood = "{h.good}"\nbad = "{h.bad}"\n\n'
        '[build]\nkind = "source"\n\n'
        f'[serve]\nmodel = "sim-model"\nenv = {{ VLLM_BISECT_SIM_PATH = "{sim_path()}" }}\n'
        'speculative = { method = "mtp", num_speculative_tokens = 3 }\n\n'
        '[probe]\nmax_tokens = 160\nrequests = 2\n\n'
        f'[verdict]\nsymptom = "{symptom}"\n')
    out().print(f"spec written to {spec}\nnext: vllm-bisect run --spec {spec} --session "
                f"{path.parent / (path.name + '-session')}", markup=False)
