"""The ``vllm-bisect`` command line: the only module that prints or picks exit codes."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import tempfile
import time
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from vllm_bisect import __version__
from vllm_bisect.bisect.driver import BisectResult
from vllm_bisect.bisect.hook import EXIT_FOR, HookExit, run_hook
from vllm_bisect.bisect.range import CommitInfo, CommitRange, open_repo
from vllm_bisect.bisect.runner import run_bisect
from vllm_bisect.bisect.session import (
    default_cache_dir,
    new_session_dir,
    stored_meta,
    stored_spec,
)
from vllm_bisect.errors import BisectError, FatalError, NotReproduced, RecoverableError, SpecError
from vllm_bisect.models import Outcome
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.report.table import STYLE, result_json, result_table
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import BisectSpec, Endpoint, ProbeSpec, dump_spec, load_spec

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find the vLLM commit that broke decode speed or output length.")
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)

EXIT_USER = 2
EXIT_NOT_REPRODUCED = 3
EXIT_INTERRUPTED = 130


def _sigterm(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _fail(e: BisectError, code: int = EXIT_USER) -> NoReturn:
    err.print(f"[bold red]error:[/] {e.message}")
    if e.log_tail:
        err.print("[dim]" + e.log_tail.replace("[", r"\[") + "[/]")
    if e.hint:
        err.print(f"[yellow]hint:[/] {e.hint}")
    raise typer.Exit(code)


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


class RichEvents:
    """Progress lines on stderr (stdout stays clean for --json)."""

    def __init__(self, console: Console, fix: bool = False) -> None:
        self.c = console
        self.started = time.monotonic()
        # a fix search runs on old/new terms: good = has the problem, bad = fixed
        self.labels = {"good": "has the problem", "bad": "fixed"} if fix else {}

    def on_range(self, rng: CommitRange) -> None:
        self.c.print(f"[bold]range[/] {rng.good.sha[:12]}..{rng.bad.sha[:12]}: "
                     f"{len(rng.commits)} commits")
        for note in rng.notes:
            self.c.print(f"[yellow]note:[/] {escape(note)}", highlight=False)

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        t = time.monotonic() - self.started
        self.c.print(f"[dim]{t:7.1f}s[/] [cyan]{role}[/] {commit.sha[:12]} "
                     f"{commit.subject[:70]} [dim](~{steps_left} steps left)[/]")

    def on_phase(self, commit: str, phase: str) -> None:
        # (parallel workers interleave: name the commit)
        self.c.print(f"[dim]          {commit[:12] + ': ' if commit else ''}{phase}[/]")

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        cached = " [dim](cached)[/]" if outcome.from_cache else ""
        self.c.print(f"          -> {commit.sha[:12]} [{STYLE[outcome.verdict]}]"
                     f"{self.labels.get(outcome.verdict.value, outcome.verdict.value)}[/]: "
                     f"{outcome.reason}{cached}")


def _bisect(spec: BisectSpec, session_dir: Path, cache_dir: Path, console: Console,
            quiet_phases: bool = False) -> BisectResult:
    events = RichEvents(console, fix=spec.range.search == "fix")
    if quiet_phases:
        events.on_phase = lambda commit, phase: None  # type: ignore[method-assign]
    return run_bisect(spec, session_dir, cache_dir, events)


def _summary(result: BisectResult, console: Console) -> None:
    console.print(result_table(result))
    if result.first_bad:
        subj = next((c.subject for c in result.range.commits if c.sha == result.first_bad), "")
        label = "first fixed commit" if result.search == "fix" else "first bad commit"
        if result.search == "fix":
            console.print("[dim]find-the-fix search: old = has the problem, new = fixed[/]")
        console.print(f"[bold red]{label}:[/] {result.first_bad} {subj}")
        console.print(f"  https://github.com/vllm-project/vllm/commit/{result.first_bad}")
    else:
        console.print("[yellow]no single culprit: only skipped commits separate good from bad."
                      "[/] candidates:")
        for c in result.candidates:
            console.print(f"  {c}")
    par = (f", {result.rounds} rounds on {result.workers} workers" if result.workers > 1
           else "")
    console.print(f"[dim]{len(result.probed)} commits judged, {result.server_starts} server "
                  f"starts{par}, {result.wall_s:.1f} s[/]")


@app.command()
def run(
    spec_path: Annotated[Path | None, typer.Option("--spec", help="bisect spec (TOML)")] = None,
    good: Annotated[str | None, typer.Option(help="last known good ref")] = None,
    bad: Annotated[str | None, typer.Option(help="first known bad ref")] = None,
    repo: Annotated[str | None, typer.Option(help="vLLM checkout (range.repo)")] = None,
    session: Annotated[Path | None, typer.Option(help="session dir (resumes if it exists)")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    symptom: Annotated[str | None, typer.Option(
        help="verdict.symptom: length|itl|correctness|any")] = None,
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
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Bisect a range: verify both endpoints, then binary (or, with several workers,
    multi-way) search to the first bad commit."""
    _setup_logging(verbose)
    try:
        session_dir = session or new_session_dir()
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
        err.print(f"[dim]session {session_dir}  (resume: "
                  f"{_resume_command(session_dir, cache_dir)})[/]")
        result = _bisect(spec, session_dir, cache_dir or default_cache_dir(), err)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted; nothing recorded is lost.[/] resume with: "
                  f"{_resume_command(session_dir, cache_dir)}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except NotReproduced as e:
        _fail(e, EXIT_NOT_REPRODUCED)
    except BisectError as e:
        _fail(e)
    if as_json:
        out.print_json(json.dumps(result_json(result)))
    else:
        _summary(result, out)


def _resources(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, amount = item.partition("=")
        try:
            out[name.strip()] = float(amount) if sep else 1.0
        except ValueError:
            raise SpecError(f"--ray-resource {item!r}: the amount is not a number",
                            hint="use NAME=AMOUNT, e.g. --ray-resource arch_aarch64=1") from None
    return out


def _resume_command(session_dir: Path, cache_dir: Path | None) -> str:
    cmd = f"vllm-bisect run --session {shlex.quote(str(session_dir))}"
    if cache_dir is not None:
        cmd += f" --cache-dir {shlex.quote(str(cache_dir))}"
    return cmd


class ReportFormat(StrEnum):
    MD = "md"
    HTML = "html"
    JSON = "json"


@app.command()
def report(
    session: Annotated[Path, typer.Argument(help="a session directory")],
    fmt: Annotated[ReportFormat, typer.Option("--format", help="md, html or json")] = ReportFormat.MD,
) -> None:
    """Print a finished session's report (Markdown to paste into a GitHub issue, HTML, JSON)."""
    from vllm_bisect.report.render import html_report, load, markdown

    try:
        r = load(session)
    except BisectError as e:
        _fail(e)
    if fmt is ReportFormat.JSON:
        out.print_json(json.dumps(r.result))
    else:
        sys.stdout.write(markdown(r) if fmt is ReportFormat.MD else html_report(r))


@app.command("triage")
def triage_cmd(
    report_file: Annotated[Path, typer.Argument(help="the regression report (Markdown)")],
    repo: Annotated[Path | None, typer.Option(help="vLLM checkout to resolve refs")] = None,
    write: Annotated[Path | None, typer.Option(help="write the spec here (TOML)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Read a regression report; print the bisect spec it implies and what is still unknown."""
    from vllm_bisect.triage import resolve_refs, triage, triage_json, validated_spec

    try:
        text = report_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        _fail(FatalError(f"{report_file} is not UTF-8 text (byte {e.start} is "
                         f"{e.object[e.start:e.start + 1]!r})",
                         hint=f"save the report as UTF-8, e.g. `iconv -f latin1 -t utf-8 "
                              f"{shlex.quote(str(report_file))} > report.md`, and triage that"))
    except OSError as err:
        _fail(FatalError(f"cannot read {report_file}: {err.strerror}",
                         hint="pass the path of a Markdown or text file"))
    t = triage(text)
    try:
        if repo is not None:
            resolve_refs(t, open_repo(repo))
        repo_path = str(repo) if repo is not None else "."
        doc = triage_json(t, repo_path)
        if write is not None:
            write.write_text(dump_spec(validated_spec(t, repo_path)))
    except BisectError as e:
        _fail(e)
    if as_json:
        out.print_json(json.dumps(doc, default=str))
        return
    search = ("find the fix (old = has the problem, new = fixed)" if t.search.value == "fix"
              else "regression (old = good, new = bad)")
    out.print(f"search: {search}", markup=False)
    out.print(f"{t.old_term}: {t.good_label or t.good or '?'}   {t.new_term}: "
              f"{t.bad_label or t.bad or '?'}", markup=False)
    out.print(f"symptoms: {', '.join(t.symptoms) or '?'}   (the spec follows: "
              f"{doc['spec']['verdict']['symptom']})", markup=False)
    out.print(f"model: {t.model or t.local_model or '?'}   speculative: "
              f"{t.speculative or 'none'}   hardware: {t.hardware}", markup=False)
    if t.serve_args or t.env:
        out.print(f"serve args: {t.serve_args}   env: {t.env}", markup=False)
    if t.bench:
        out.print(f"probe.bench: {t.bench['kind']} {' '.join(t.bench['args'])}", markup=False)
    for r in t.read:
        out.print(f"  read {r.what}: {r.value}" + (f" (line {r.line})" if r.line else "")
                  + f": {r.why}", markup=False, highlight=False)
    for w in t.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")
    for u in t.unknowns:
        out.print(f"[red]unknown:[/] {escape(u)}")
    if doc.get("compare_command"):
        out.print(f"A/B the env var the report flips: {doc['compare_command']}", markup=False)
    if write is not None:
        out.print(f"spec written to {write}")


@app.command()
def probe(
    url: Annotated[str, typer.Option(help="base URL of a running vLLM server")],
    model: Annotated[str, typer.Option(help="served model name")],
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request")] = 512,
    no_max_tokens: Annotated[bool, typer.Option(
        "--no-max-tokens", help="send no max_tokens (rely on server defaults)")] = False,
    requests: Annotated[int, typer.Option(help="measured requests")] = 3,
    concurrency: Annotated[int, typer.Option(help="requests in flight")] = 1,
    endpoint: Annotated[Endpoint, typer.Option(help="completions or chat")] = Endpoint.COMPLETIONS,
    prompt: Annotated[str | None, typer.Option(help="prompt text")] = None,
    warmup: Annotated[int, typer.Option(help="uncounted warm-up requests")] = 1,
    ignore_eos: Annotated[bool, typer.Option(help="send ignore_eos")] = True,
    log: Annotated[Path | None, typer.Option(help="server log to scan for notes")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Probe an already-running server once and print the measurement."""
    try:
        fields: dict[str, Any] = dict(max_tokens=max_tokens, send_max_tokens=not no_max_tokens,
                                      requests=requests, concurrency=concurrency,
                                      endpoint=endpoint, warmup=warmup, ignore_eos=ignore_eos)
        if prompt is not None:
            fields["prompt"] = prompt
        try:
            spec = ProbeSpec(**fields)
        except ValueError as e:
            raise FatalError(f"invalid probe option: {e}") from None
        handle = ServerHandle(url=url.rstrip("/"), model=model, log_path=log)
        m = DecodeProbe(spec).measure(handle)
    except BisectError as e:
        _fail(e, EXIT_USER if isinstance(e, FatalError) else 1)
    if as_json:
        out.print_json(m.model_dump_json(exclude={"requests"}))
        return
    out.print(f"output tokens {m.output_tokens} (requested {m.requested_tokens}, "
              f"length ok: {m.length_ok}, finish {m.finish_reasons})")
    out.print(f"ITL {_f(m.itl_ms)} ms per token (server-counted tokens); chunk ITL "
              f"{_f(m.chunk_itl_ms)} ms; {_f(m.tokens_per_chunk)} tokens/chunk; "
              f"TTFT {_f(m.ttft_ms)} ms; TPOT {_f(m.tpot_ms)} ms")
    out.print(f"acceptance length {_f(m.acceptance_length)}; server ITL "
              f"{_f(m.server_itl_ms)} ms/step; tokens from {m.tokens_source.value}")
    for note in m.notes:
        out.print(f"[yellow]note:[/] {note}")


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


@app.command()
def hook(
    spec_path: Annotated[Path, typer.Option("--spec", help="bisect spec (TOML)")],
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """For `git bisect run`: judge HEAD. Exit 0 good, 1 bad, 125 skip, 128 abort."""
    _setup_logging(verbose)
    try:
        spec = load_spec(spec_path)
        outcome = run_hook(spec, Path.cwd(), cache_dir or default_cache_dir())
    except KeyboardInterrupt:
        raise typer.Exit(HookExit.ABORT) from None
    except RecoverableError as e:  # should not escape run_hook; never let it look "bad"
        err.print(f"skip: {e.message}")
        raise typer.Exit(HookExit.SKIP) from None
    except BisectError as e:
        _fail(e, HookExit.ABORT)
    err.print(f"vllm-bisect: {outcome.commit[:12]} [{STYLE[outcome.verdict]}]"
              f"{outcome.verdict.value}[/]: {outcome.reason}")
    raise typer.Exit(EXIT_FOR[outcome.verdict])


@app.command()
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    workdir: Annotated[Path | None, typer.Option(help="keep the history and session here")] = None,
    workers: Annotated[int, typer.Option(help="commits tested at once (simulator workers)")] = 1,
) -> None:
    """Bisect an embedded synthetic vLLM history with a planted 128-token cap (no GPU)."""
    from vllm_bisect.demo import make_demo

    _setup_logging(False)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vllm-bisect-demo-") as tmp:
        root = workdir or Path(tmp)
        try:
            d = make_demo(root)
            err.print(f"[bold]demo:[/] synthetic vLLM history at {d.history.path} "
                      f"({len(d.history.shas) - 1} commits after the good base); planted "
                      f"128-token cap under MTP at {d.history.planted['length'][:12]}, "
                      f"{len(d.history.unbuildable)} unbuildable commits")
            spec = d.spec.with_overrides(parallel={"workers": workers}) if workers > 1 else d.spec
            result = _bisect(spec, root / "session", root / "cache", err, quiet_phases=True)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except BisectError as e:
            _fail(e, 1)
        if as_json:
            doc = result_json(result)
            doc["planted"] = d.history.planted["length"]
            doc["unbuildable"] = list(d.history.unbuildable)
            doc["found_planted"] = result.first_bad == doc["planted"]
            doc["demo_wall_s"] = round(time.monotonic() - started, 2)
            out.print_json(json.dumps(doc))
        else:
            _summary(result, out)
            ok = result.first_bad == d.history.planted["length"]
            out.print(("[green]found the planted regression[/]" if ok
                       else "[red]did NOT find the planted regression[/]") +
                      f" in {time.monotonic() - started:.1f} s")
        if result.first_bad != d.history.planted["length"]:
            raise typer.Exit(1)


def _env_pairs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FatalError(f"expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


@app.command("compare")
def compare_cmd(
    spec_path: Annotated[Path, typer.Option("--spec", help="bisect spec (TOML)")],
    commit: Annotated[str | None, typer.Option(help="commit to test (default: range.bad)")] = None,
    a_env: Annotated[list[str] | None, typer.Option(help="A's extra env KEY=VALUE")] = None,
    b_env: Annotated[list[str] | None, typer.Option(help="B's extra env KEY=VALUE")] = None,
    a_arg: Annotated[list[str] | None, typer.Option(help="A's extra serve argument")] = None,
    b_arg: Annotated[list[str] | None, typer.Option(help="B's extra serve argument")] = None,
    a_no_speculative: Annotated[bool, typer.Option(help="A without speculative decoding")] = False,
    b_no_speculative: Annotated[bool, typer.Option(help="B without speculative decoding")] = False,
    pairs: Annotated[int, typer.Option(help="interleaved A/B pairs")] = 10,
    seed: Annotated[int | None, typer.Option(help="seed of the AB/BA order")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """A/B two serve configs at one commit on the same GPU: paired gain with a 95% CI."""
    from vllm_bisect.compare import Variant, compare

    _setup_logging(False)
    try:
        spec = load_spec(spec_path)
        repo_ = open_repo(spec.range.repo)
        from vllm_bisect.bisect.range import resolve

        ref = commit or spec.range.bad
        if ref is None:
            raise FatalError("no commit given", hint="pass --commit or set range.bad")
        sha = resolve(repo_, ref, "commit").hexsha
        root = cache_dir or default_cache_dir()
        logs = root / "compare-logs"
        from vllm_bisect.builders import make_builder

        a = Variant("a", _env_pairs(a_env), list(a_arg or []), not a_no_speculative)
        b = Variant("b", _env_pairs(b_env), list(b_arg or []), not b_no_speculative)
        res = compare(spec, make_builder(spec, repo_, root, logs), sha, a, b, pairs, logs, seed)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except BisectError as e:
        _fail(e)
    if as_json:
        out.print_json(json.dumps(res.to_dict()))
    else:
        out.print(res.describe())


@app.command()
def version() -> None:
    """Print the version."""
    out.print(__version__)


from vllm_bisect import cli_sweep as _sweep  # noqa: E402  (registers sweep)
from vllm_bisect import cli_tools as _tools  # noqa: E402  (registers cache, env, bot)

del _tools, _sweep


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started with SIGINT ignored (`cmd &` from a script, some CI runners): Ctrl-C must
        # still stop the run and tear its servers down
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()


if __name__ == "__main__":  # run the imported module's app, on which cli_tools registered
    from vllm_bisect.cli import main as _main

    _main()
