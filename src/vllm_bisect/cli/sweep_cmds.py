"""``vllm-bisect sweep``: the MTP speed-up table over concurrency x context at one commit.

The work is in :mod:`vllm_bisect.sweep`, imported when the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vllm_bisect.cli.app import (
    command,
    err,
    one_commit,
    out,
    print_json,
    user_errors,
)
from vllm_bisect.cli.app import setup_logging as _setup_logging
from vllm_bisect.errors import FatalError


def _ints(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        vals = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise FatalError(f"--{what} takes comma-separated integers, got {text!r}",
                         hint=f"e.g. --{what} 1,4,12") from None
    if not vals or min(vals) < 1:
        raise FatalError(f"--{what} values must be positive integers, got {text!r}")
    return vals


@command("sweep")
def sweep_cmd(
    spec_path: Annotated[Path, typer.Option("--spec", help="spec TOML (serve.speculative set)")],
    commit: Annotated[str | None, typer.Option(help="commit to measure (default: range.bad)")] = None,
    concurrency: Annotated[str | None, typer.Option(help="e.g. 1,4,12 (default: the spec's "
                                                         "probe.mtp_speedup)")] = None,
    context: Annotated[str | None, typer.Option(help="prompt tokens, e.g. 2048,32768")] = None,
    requests: Annotated[int | None, typer.Option(help="requests per cell (>= concurrency)")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="output tokens per request")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="write sweep.md and sweep.json "
                                                               "here")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """MTP on vs off over concurrency x context at one commit (tok/s, change %, acceptance)."""
    from vllm_bisect.cli.run_cmds import RichEvents
    from vllm_bisect.spec import load_spec
    from vllm_bisect.sweep import run_sweep, sweep_spec, write_report

    _setup_logging(False)
    with user_errors():
        spec = sweep_spec(load_spec(spec_path), _ints(concurrency, "concurrency"),
                          _ints(context, "context"), requests, max_tokens)
        repo, sha, root, logs = one_commit(spec, commit, cache_dir, "sweep-logs")
        events = RichEvents(err())
        res = run_sweep(spec, repo, sha, root, logs, on_phase=events.on_phase)
        md, js = write_report(res, out_dir or root / "sweeps" / sha[:12])
    if as_json:
        print_json(json.dumps(res.to_dict()))
    else:
        out().print(res.markdown(), markup=False)
        err().print(f"[dim]wrote {md} and {js}[/]")
