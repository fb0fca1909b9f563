"""The CLI's application object and what every command shares: consoles, errors, logging.

Only the ``cli`` package prints or picks exit codes. Imports here stay light (typer and
the error tree): ``vllm-bisect version`` and ``--help`` must not load the bisect core, scipy,
docker or ray; each command imports what it uses when it runs.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from vllm_bisect.errors import BisectError

if TYPE_CHECKING:
    from pathlib import Path

    import git
    from rich.console import Console

    from vllm_bisect.spec import BisectSpec

EXIT_USER = 2
EXIT_NOT_REPRODUCED = 3
EXIT_INTERRUPTED = 130
EXIT_ABORT = 128  # `git bisect run` stops on >= 128; 1..127 (but 125) would read as "bad"


def _plain_flags(params: list[Any]) -> list[Any]:
    """Show a boolean flag as a flag (``--json``), not as ``--json <bool>``."""
    for p in params:
        if getattr(p, "is_flag", False):
            p.metavar = ""
    return params


class FlagCommand(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


def under_git_bisect() -> bool:
    """Whether git started this process (git exports ``GIT_EXEC_PATH`` to every program it
    runs) while a bisect is in progress in the working directory's repository (git's
    ``BISECT_START`` exists from ``git bisect start`` to ``git bisect reset``)."""
    import os
    import subprocess
    from pathlib import Path

    if not os.environ.get("GIT_EXEC_PATH"):
        return False
    try:
        r = subprocess.run(["git", "rev-parse", "--git-path", "BISECT_START"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and Path(r.stdout.strip()).is_file()


class AbortOnUsageCommand(FlagCommand):
    """A command run by `git bisect run` (the hook): a usage error (unknown option, missing
    ``--spec``, bad value) exits ``EXIT_ABORT``, never click's 2, which git reads as "bad".
    ``--help`` / ``-h`` print the help and exit 0, but ``EXIT_ABORT`` under `git bisect run`
    (:func:`under_git_bisect`), where 0 would mark the commit good."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.context_settings = {"help_option_names": ["-h", "--help"],
                                 **self.context_settings}

    def make_context(self, info_name: str | None, args: list[str],
                     parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except Exception as e:  # click's UsageError (typer vendors its own click): exit 2
            code = getattr(e, "exit_code", None)
            if code == EXIT_USER:
                e.exit_code = EXIT_ABORT  # type: ignore[attr-defined]
            elif code == 0 and type(e).__name__ == "Exit" and under_git_bisect():
                err().print(f"vllm-bisect: help only, no verdict: exit {EXIT_ABORT} so that "
                            "`git bisect run` stops instead of marking this commit good")
                e.exit_code = EXIT_ABORT  # type: ignore[attr-defined]
            raise


class FlagGroup(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


def typer_app(help: str, **kwargs: Any) -> typer.Typer:
    return typer.Typer(cls=FlagGroup, help=help, **kwargs)


app = typer_app("Find the vLLM commit that broke decode speed or output length.",
                add_completion=False, no_args_is_help=True)


F = TypeVar("F", bound=Callable[..., Any])


def _print_version(value: bool) -> None:
    if value:
        from vllm_bisect import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="print the version and exit (as `vllm-bisect version` does)")] = False) -> None:
    """Find the vLLM commit that broke decode speed or output length."""


def command(name: str | None = None, on: typer.Typer = app,
            cls: type[TyperCommand] = FlagCommand) -> Callable[[F], F]:
    """``@command()``: register a command whose flags show as flags, its help the docstring
    with each paragraph on one line (the terminal wraps it: the docstring's own line breaks
    cut sentences in the middle, issue 50)."""
    def register(f: F) -> F:
        done: F = on.command(name, cls=cls, help=one_line_paragraphs(f.__doc__ or ""))(f)
        return done
    return register


def one_line_paragraphs(doc: str) -> str:
    """``doc`` with the line breaks inside each paragraph joined (blank lines kept)."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


@functools.cache
def err() -> Console:
    """stderr: progress, errors (stdout stays clean for --json)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)


@functools.cache
def out() -> Console:
    """stdout: results."""
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def esc(text: object) -> str:
    """``text`` with rich markup escaped ("[ops]" prints as "[ops]", not as nothing) and
    terminal control sequences removed (a commit subject or a server body never drives the
    terminal)."""
    from rich.markup import escape

    from vllm_bisect.errors import printable

    return escape(printable(str(text)))


def fail(e: BisectError, code: int = EXIT_USER) -> NoReturn:
    """Print a user-facing error (message, log tail, hint) and exit with ``code``."""
    err().print(f"[bold red]error:[/] {esc(e.message)}")
    if e.log_tail:
        err().print("[dim]" + esc(e.log_tail) + "[/]")
    if e.hint:
        err().print(f"[yellow]hint:[/] {esc(e.hint)}")
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors(code: int = EXIT_USER) -> Iterator[None]:
    """Ctrl-C exits with ``EXIT_INTERRUPTED``; a :class:`BisectError` is printed (no traceback)
    and exits with ``code``."""
    try:
        yield
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except BisectError as e:
        fail(e, code)


VerboseOpt = Annotated[bool, typer.Option("-v", "--verbose", help="log what happens")]


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def one_commit(spec: BisectSpec, commit: str | None, cache_dir: Path | None, logs: str
               ) -> tuple[git.Repo, str, Path, Path]:
    """For the one-commit commands (compare, sweep): the spec's repo, the commit (--commit,
    else range.bad) as a full sha, the cache root and this command's log directory."""
    from vllm_bisect.bisect.range import open_repo, resolve_ref
    from vllm_bisect.bisect.state.session import default_cache_dir
    from vllm_bisect.errors import FatalError

    repo = open_repo(spec.range.repo)
    ref = commit or spec.range.bad
    if ref is None:
        raise FatalError("no commit given", hint="pass --commit or set range.bad")
    sha = resolve_ref(repo, ref, "commit").hexsha
    # absolute: the builders run tools in other directories (a relative --cache-dir failed
    # explain and sweep with "No such file" under venvs/)
    root = (cache_dir or default_cache_dir()).expanduser().resolve()
    return repo, sha, root, root / logs


def print_json(doc: str) -> None:
    out().print_json(doc)
