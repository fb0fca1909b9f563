"""``vllm-bisect hook``: judge HEAD for ``git bisect run``, behind one guard.

git reads the hook's exit status as the verdict: 0 good, 1..127 (but 125) bad, 125 skip,
>= 128 stop the bisect. Only a measured verdict may exit 0 or 1, and only a skip 125; every
other end (a spec or flag mistake, a damaged journal, Ctrl-C, an exception nobody expected,
even ``SystemExit`` from a library) exits ``EXIT_ABORT`` with its cause and a hint on stderr.
Exit 1 from an unexpected error would mark HEAD bad and git would name a wrong first bad
commit with exit 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import traceback
from pathlib import Path
from typing import Annotated

import typer

from vllm_bisect.cli.app import EXIT_ABORT, AbortOnUsageCommand, VerboseOpt, command, err, esc
from vllm_bisect.errors import BisectError, RecoverableError

logger = logging.getLogger(__name__)

EXIT_SKIP = 125


def _say(text: str) -> None:
    """Print on stderr; a stderr that cannot be written (closed, a full pipe) must not turn
    the exit status into something else."""
    try:
        err().print(text)
    except Exception:  # rich and the stream may fail in any way here
        with contextlib.suppress(OSError):
            os.write(2, (text + "\n").encode("utf-8", "replace"))


def _where(e: BaseException) -> str:
    """The innermost frame of ``e``'s traceback: ``file:line in function``."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "?"
    f = frames[-1]
    return f"{Path(f.filename).name}:{f.lineno} in {f.name}"


def _judge(spec_path: Path, cache_dir: Path | None, verbose: bool) -> int:
    from vllm_bisect.bisect.hook import EXIT_FOR, run_hook
    from vllm_bisect.bisect.state.session import default_cache_dir, usable_cache_dir
    from vllm_bisect.cli.app import setup_logging
    from vllm_bisect.report.table import STYLE
    from vllm_bisect.spec import load_spec
    from vllm_bisect.text import plural

    setup_logging(verbose)
    spec = load_spec(spec_path)
    # (made absolute here: a relative one is the directory `git bisect run` started in; the
    # build runs its tools elsewhere)
    cache = usable_cache_dir((cache_dir if cache_dir is not None else default_cache_dir())
                             .expanduser().resolve())
    from vllm_bisect.cli.app import err as console
    from vllm_bisect.cli.run_cmds import RichEvents

    # how long a request may take, before any is sent (a deadline of days is seen at once)
    _say(f"vllm-bisect: {esc(spec.ops.deadline_text(spec.probe.sent_max_tokens()))}")
    # progress on stderr: a line a commit tested and a server started (issue 50: a first
    # call ran 24.7 s and 10 server starts with one line)
    result = run_hook(spec, Path.cwd(), cache, RichEvents(console()))
    outcome = result.outcome
    code = int(EXIT_FOR[outcome.verdict])
    if result.reused:   # the journal, not --cache-dir, holds these: say so (issue 42)
        head = ", HEAD's among them" if result.head_reused else ""
        _say(f"vllm-bisect: reused {plural(result.reused, 'verdict')} from "
             f"{esc(str(result.journal))} (this bisect's earlier hook calls{head}; to start "
             f"clean: rm -r {esc(shlex.quote(str(result.journal)))})")
    elif outcome.from_cache:
        _say(f"vllm-bisect: {outcome.commit[:12]} measured before: reused from the result "
             f"cache {esc(str(cache))}")
    _say(f"vllm-bisect: {outcome.commit[:12]} [{STYLE[outcome.verdict]}]"
         f"{outcome.verdict.value}[/]: {esc(outcome.reason)}")
    return code


def judge_head(spec_path: Path, cache_dir: Path | None, verbose: bool) -> int:
    """The hook's exit status for HEAD: a verdict (0/1), a skip (125), else ``EXIT_ABORT``
    with the cause and a hint printed. Never raises."""
    try:
        return _judge(spec_path, cache_dir, verbose)
    except KeyboardInterrupt:
        _say(f"vllm-bisect: interrupted, no verdict: exit {EXIT_ABORT} stops `git bisect run`")
    except RecoverableError as e:  # (run_hook makes these skips; never let one look "bad")
        _say(f"skip: {esc(e.message)}")
        return EXIT_SKIP
    except BisectError as e:
        _say(f"[bold red]error:[/] {esc(e.message)}")
        if e.log_tail:
            _say("[dim]" + esc(e.log_tail) + "[/]")
        _say(f"[yellow]hint:[/] {esc(e.hint or 'fix the cause above, then run the hook again')}")
    except BaseException as e:  # the guard: nothing else may become a verdict
        _unexpected(e, verbose)
    return EXIT_ABORT


def _unexpected(e: BaseException, verbose: bool) -> None:
    _say(f"[bold red]error:[/] unexpected {type(e).__name__} while judging HEAD, so no "
         f"verdict: {esc(e)} (at {esc(_where(e))})")
    if verbose:
        _say(esc("".join(traceback.format_exception(e)).rstrip()))
    _say(f"[yellow]hint:[/] exit {EXIT_ABORT} stops `git bisect run` here (exit 1 would mark "
         "this commit bad); look for the cause above, "
         + ("and report the traceback above as a vllm-bisect bug" if verbose else
            "or run `vllm-bisect hook --spec S -v` at this commit for the traceback (a "
            "vllm-bisect bug: worth reporting)"))


@command(cls=AbortOnUsageCommand)
def hook(
    spec_path: Annotated[Path, typer.Option("--spec", help="bisect spec (TOML)")],
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """For `git bisect run`: judge HEAD. Exit 0 good, 1 bad, 125 skip, 128 abort (every
    error that is not a verdict)."""
    raise typer.Exit(judge_head(spec_path, cache_dir, verbose))
