"""Commands around a bisect: ``triage``, ``probe``, ``compare``, ``cache ls|prune``, ``env``,
``version`` (the bot's: ``cli/bot_cmds.py``)."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from vllm_bisect import __version__
from vllm_bisect.cli.app import (
    EXIT_USER,
    app,
    command,
    err,
    esc,
    fail,
    one_commit,
    out,
    print_json,
    setup_logging,
    typer_app,
    user_errors,
)
from vllm_bisect.errors import BisectError, FatalError
from vllm_bisect.text import plural


@command("triage")
def triage_cmd(
    report_file: Annotated[Path | None, typer.Argument(
        help="the regression report (Markdown: the issue body)")] = None,
    repo: Annotated[Path | None, typer.Option(help="vLLM checkout to resolve refs")] = None,
    write: Annotated[Path | None, typer.Option(
        help="write the spec here (TOML); with --form, the form (YAML)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    form: Annotated[bool, typer.Option(
        "--form", help="print the regression issue form (GitHub issue-forms YAML)")] = False,
) -> None:
    """Read a regression report; print the bisect spec it implies and what is still unknown.
    A body filed with the regression form (--form) is read field by field, exactly."""
    if form:
        form_cmd(report_file, write)
        return
    if report_file is None:
        fail(FatalError("no report given", hint="pass the issue body as a file: `vllm-bisect "
                        "triage REPORT.md`; `vllm-bisect triage --form` prints the issue form"))
    from vllm_bisect.bisect.range import open_repo
    from vllm_bisect.triage import resolve_refs, spec_toml, triage, triage_json

    try:
        text = report_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        fail(FatalError(f"{report_file} is not UTF-8 text (byte {e.start} is "
                        f"{e.object[e.start:e.start + 1]!r})",
                        hint=f"save the report as UTF-8, e.g. `iconv -f latin1 -t utf-8 "
                             f"{shlex.quote(str(report_file))} > report.md`, and triage that"))
    except OSError as e:
        fail(FatalError(f"cannot read {report_file}: {e.strerror}",
                        hint="pass the path of a Markdown or text file"))
    t = triage(text)
    try:
        if repo is not None:
            resolve_refs(t, open_repo(repo))
        repo_path = str(repo) if repo is not None else "."
        doc = triage_json(t, repo_path)
        if write is not None:
            write.write_text(spec_toml(t, repo_path, shlex.quote(str(report_file))))
    except BisectError as e:
        fail(e)
    doc["next_command"] = next_command(doc["spec"], report_file, write)
    if as_json:
        print_json(json.dumps(doc, default=str))
        return
    from rich.markup import escape

    o = out()
    search = ("find the fix (old = has the problem, new = fixed)" if t.search.value == "fix"
              else "regression (old = good, new = bad)")
    o.print(f"search: {search}", markup=False)
    o.print(f"{t.old_term}: {t.good_label or t.good or '?'}   {t.new_term}: "
            f"{t.bad_label or t.bad or '?'}", markup=False)
    o.print(f"symptoms: {', '.join(t.symptoms) or '?'}   (the spec follows: "
            f"{doc['spec']['verdict']['symptom']})", markup=False)
    o.print(f"model: {t.model or t.local_model or '?'}   speculative: "
            f"{t.speculative or 'none'}   hardware: {t.hardware}", markup=False)
    written = doc["spec"]["serve"]
    if written["args"] or written["env"]:   # what the spec holds (chosen values below)
        o.print(f"serve args: {written['args']}   env: {written['env']}", markup=False)
    bench = doc["spec"]["probe"].get("bench")
    if bench:  # what the spec holds, so the two agree
        o.print(f"probe.bench: {bench['kind']} {' '.join(bench['args'])}", markup=False)
    elif t.bench:
        o.print(f"the report's `vllm bench {t.bench['kind']}` is not in the spec: probe.bench "
                f"serves only the throughput symptom (this spec judges "
                f"{doc['spec']['verdict']['symptom']})", markup=False)
    if t.form:
        o.print("the report is the regression form: 'read' values are its answers as written, "
                "'guessed' ones come from its free text", markup=False)
    for r in t.read:
        o.print(f"  {r.source.value} {r.what}: {r.value}" + (f" (line {r.line})" if r.line else "")
                + f": {r.why}", markup=False, highlight=False)
    for c in doc["chose"]:   # in the spec, not said by the report (issue 42)
        o.print(f"  chose {c['what']} = {c['value']}: {c['why']}", markup=False,
                highlight=False)
    for w in t.warnings:
        o.print(f"[yellow]warning:[/] {escape(w)}")
    for u in t.unknowns:
        o.print(f"[red]unknown:[/] {escape(u)}")
    if doc.get("compare_command"):
        o.print(f"A/B the env var the report flips: {doc['compare_command']}", markup=False)
    if write is not None:
        o.print(f"spec written to {write}")
    o.print(f"next: {doc['next_command']}", markup=False, highlight=False, soft_wrap=True)


def form_cmd(stray: Path | None, write: Path | None) -> None:
    """``triage --form``: the form's YAML on stdout, or written to ``write``."""
    from vllm_bisect.triage.form import form_yaml

    if stray is not None:
        fail(FatalError(f"--form takes no report ({stray} was given)",
                        hint="`vllm-bisect triage --form` prints the form; add `--write "
                             ".github/ISSUE_TEMPLATE/regression.yml` to write it"))
    text = form_yaml()
    if write is None:
        out().print(text, markup=False, highlight=False, emoji=False, soft_wrap=True, end="")
        return
    try:
        write.parent.mkdir(parents=True, exist_ok=True)
        write.write_text(text, encoding="utf-8")
    except OSError as e:
        fail(FatalError(f"cannot write {write}: {e.strerror}",
                        hint="pass a writable path, e.g. .github/ISSUE_TEMPLATE/regression.yml"))
    out().print(f"form written to {write} (GitHub reads it from .github/ISSUE_TEMPLATE/)",
                markup=False, highlight=False)


def next_command(spec_doc: dict[str, Any], report_file: Path, write: Path | None) -> str:
    """The command to run after triage: the bisect on the written spec (after writing it, and
    after setting the keys the report did not give: a range end, the model)."""
    spec = shlex.quote(str(write)) if write is not None else "spec.toml"
    steps = [] if write is not None else [
        f"vllm-bisect triage {shlex.quote(str(report_file))} --write spec.toml"]
    missing = [key for key, value in (("range.good", spec_doc["range"].get("good")),
                                      ("range.bad", spec_doc["range"].get("bad")),
                                      ("serve.model", spec_doc["serve"].get("model")))
               if not value]
    if missing:
        steps.append(f"set {', '.join(missing)} in {spec} (see the unknowns above)")
    steps.append(f"vllm-bisect run --spec {spec}")
    return ", then ".join(steps)


@command()
def probe(
    url: Annotated[str, typer.Option(help="base URL of a running vLLM server")],
    model: Annotated[str, typer.Option(help="served model name")],
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request")] = 512,
    no_max_tokens: Annotated[bool, typer.Option(
        "--no-max-tokens", help="send no max_tokens (rely on server defaults)")] = False,
    requests: Annotated[int, typer.Option(help="measured requests")] = 3,
    concurrency: Annotated[int, typer.Option(help="requests in flight")] = 1,
    endpoint: Annotated[str, typer.Option(help="completions or chat")] = "completions",
    prompt: Annotated[str | None, typer.Option(help="prompt text")] = None,
    warmup: Annotated[int, typer.Option(help="uncounted warm-up requests")] = 1,
    ignore_eos: Annotated[bool, typer.Option(help="send ignore_eos")] = True,
    timeout: Annotated[float, typer.Option(help="seconds a request may stream")] = 600.0,
    log: Annotated[Path | None, typer.Option(help="server log to scan for notes")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Probe an already-running server once and print the measurement."""
    from pydantic import ValidationError

    from vllm_bisect.probes.decode import DecodeProbe
    from vllm_bisect.runtime.base import ServerHandle
    from vllm_bisect.spec import OpsSpec, ProbeSpec

    try:
        fields: dict[str, Any] = dict(max_tokens=max_tokens, send_max_tokens=not no_max_tokens,
                                      requests=requests, concurrency=concurrency,
                                      endpoint=endpoint, warmup=warmup, ignore_eos=ignore_eos)
        if prompt is not None:
            fields["prompt"] = prompt
        try:
            ops = OpsSpec(request_timeout_s=timeout)
        except ValidationError as e:
            raise FatalError(f"invalid probe option: --timeout: {e.errors()[0]['msg']}",
                             hint="seconds, a finite number up to a week") from None
        try:
            spec = ProbeSpec(**fields)
        except ValidationError as e:
            bad = "; ".join(f"--{'-'.join(map(str, x['loc'])).replace('_', '-')}: {x['msg']}"
                            for x in e.errors())
            raise FatalError(f"invalid probe option: {bad}") from None
        handle = ServerHandle(url=url.rstrip("/"), model=model, log_path=log)
        m = DecodeProbe(spec, ops=ops).measure(handle)
    except BisectError as e:
        fail(e, EXIT_USER if isinstance(e, FatalError) else 1)
    if as_json:
        print_json(m.model_dump_json(exclude={"requests"}))
        return
    o = out()
    o.print(f"output tokens {m.output_tokens} (requested {m.requested_tokens}, "
            f"length ok: {m.length_ok}, finish {m.finish_reasons})")
    o.print(f"ITL {_f(m.itl_ms)} ms per token (server-counted tokens); chunk ITL "
            f"{_f(m.chunk_itl_ms)} ms; {_f(m.tokens_per_chunk)} tokens/chunk; "
            f"TTFT {_f(m.ttft_ms)} ms; TPOT {_f(m.tpot_ms)} ms")
    o.print(f"acceptance length {_f(m.acceptance_length)}; server ITL "
            f"{_f(m.server_itl_ms)} ms/step; tokens from {m.tokens_source.value}")
    for note in m.notes:
        o.print(f"[yellow]note:[/] {esc(note)}")


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _env_pairs(items: list[str] | None) -> dict[str, str]:
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FatalError(f"expected KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


@command("compare")
def compare_cmd(
    spec_path: Annotated[Path, typer.Option("--spec", help="bisect spec (TOML)")],
    commit: Annotated[str | None, typer.Option(help="commit to test (default: range.bad)")] = None,
    a_env: Annotated[list[str] | None, typer.Option(help="A's extra env KEY=VALUE")] = None,
    b_env: Annotated[list[str] | None, typer.Option(help="B's extra env KEY=VALUE")] = None,
    a_arg: Annotated[list[str] | None, typer.Option(help="A's extra serve argument")] = None,
    b_arg: Annotated[list[str] | None, typer.Option(help="B's extra serve argument")] = None,
    a_no_speculative: Annotated[bool, typer.Option(
        "--a-no-speculative", help="A without speculative decoding")] = False,
    b_no_speculative: Annotated[bool, typer.Option(
        "--b-no-speculative", help="B without speculative decoding")] = False,
    pairs: Annotated[int, typer.Option(help="interleaved A/B pairs")] = 10,
    seed: Annotated[int | None, typer.Option(help="seed of the AB/BA order")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """A/B two serve configs at one commit on the same GPU: paired gain with a 95% CI."""
    from vllm_bisect.compare import Variant, compare
    from vllm_bisect.spec import load_spec

    setup_logging(False)
    with user_errors():
        spec = load_spec(spec_path)
        repo, sha, root, logs = one_commit(spec, commit, cache_dir, "compare-logs")
        a = Variant("a", _env_pairs(a_env), list(a_arg or []), not a_no_speculative)
        b = Variant("b", _env_pairs(b_env), list(b_arg or []), not b_no_speculative)
        res = compare(spec, repo, sha, a, b, pairs, root, logs, seed,
                      say=lambda line: err().print(f"[dim]{esc(line)}[/]"))
    if as_json:
        print_json(json.dumps(res.to_dict()))
    else:
        out().print(res.describe())


@command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)  # (plain: no console needed)


cache_app = typer_app("Inspect and prune the cache (artifacts, source-build venvs, worktrees, "
                      "uv downloads, measurements).")
app.add_typer(cache_app, name="cache")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


@command("ls", on=cache_app)
def cache_ls(
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """List everything the cache holds (artifacts, source-build venvs, worktrees, uv's
    downloads, the measurements), least recently used first."""
    from vllm_bisect.bisect.state.session import default_cache_dir
    from vllm_bisect.builders.cache import ArtifactCache
    from vllm_bisect.builders.cache_contents import holdings

    cache = ArtifactCache(cache_dir or default_cache_dir())
    found = holdings(cache)
    total = sum(h.size for h in found)
    if as_json:
        print_json(json.dumps({"root": str(cache.root), "total_bytes": total, "entries": [
            {"kind": h.kind, "commit": h.commit, "size": h.size, "last_used": h.last_used,
             "location": h.location, "prunable": h.prunable} for h in found]}))
        return
    from rich.table import Table

    t = Table(title=f"cache {cache.root}")
    for col in ("kind", "commit", "size", "last used", "location"):
        t.add_column(col, overflow="fold")
    for h in found:
        t.add_row(h.kind + ("" if h.prunable else " (kept)"), (h.commit or "-")[:12],
                  _human(h.size), time.strftime("%Y-%m-%d %H:%M", time.localtime(h.last_used)),
                  h.location)
    out().print(t)
    kinds: dict[str, int] = {}
    for h in found:
        kinds[h.kind] = kinds.get(h.kind, 0) + h.size
    by_kind = ", ".join(f"{k} {_human(v)}" for k, v in sorted(kinds.items()))
    entries = plural(len(found), "entry", "entries")
    out().print(f"total {_human(total)} in {entries}" + (f" ({by_kind})" if by_kind else ""),
                markup=False)


@command("prune", on=cache_app)
def cache_prune(
    max_size: Annotated[str, typer.Option(help="keep at most this much, e.g. 200G")] = "200G",
    keep: Annotated[list[str] | None, typer.Option(help="commits never evicted")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
) -> None:
    """Evict least-recently-used holdings (artifacts, source-build venvs, worktrees, uv's
    downloads) until the cache fits --max-size; the measurements are kept."""
    from vllm_bisect.bisect.state.session import default_cache_dir
    from vllm_bisect.builders.cache import ArtifactCache, parse_size
    from vllm_bisect.builders.cache_contents import holdings, prune_all

    try:
        limit = parse_size(max_size)
    except ValueError:
        fail(FatalError(f"invalid --max-size {max_size!r}", hint="use e.g. 500M, 50G, 1T"))
    cache = ArtifactCache(cache_dir or default_cache_dir())
    evicted = prune_all(cache, limit, keep=keep or [], remove_image=cache.remove_image)
    for e in evicted:
        out().print(f"evicted {e.kind} {(e.commit or '-')[:12]} {_human(e.size)} {e.location}",
                    markup=False, soft_wrap=True)
    left = holdings(cache)
    kept = [h for h in left if not h.prunable]
    note = (f"; the measurements ({_human(sum(h.size for h in kept))}, {kept[0].location}) "
            "are never pruned" if kept else "")
    out().print(f"{len(evicted)} evicted; {_human(sum(h.size for h in left))} left "
                f"(limit {max_size}){note}", markup=False, soft_wrap=True)


@command("env")
def env_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Show the platform (GPUs, sm_XX, CUDA, arch, glibc, docker) and the defaults it implies."""
    from vllm_bisect.envinfo import detect, relevant_env

    p = detect()
    doc = p.to_dict()
    env = relevant_env()
    doc["env"] = env
    if as_json:
        print_json(json.dumps(doc))
        return
    o = out()
    if not p.gpus:
        o.print("[yellow]no NVIDIA GPU found[/] (nvidia-smi missing or silent): "
                "wheel variant defaults to cpu")
    for g in p.gpus:
        o.print(f"GPU {g.name}: compute capability {g.compute_capability} ({g.sm}"
                f"{', ' + g.nickname if g.nickname else ''}), driver {g.driver}")
    o.print(f"CUDA (driver) {p.cuda_version or '-'}; {p.machine}; glibc "
            f"{doc['glibc'] or '-'}; docker {'yes' if p.docker else 'no'}; "
            f"nvidia container runtime {'yes' if p.nvidia_container_runtime else 'no'}")
    o.print(f"defaults: arch {p.arch}, docker platform {p.docker_platform}, wheel variant "
            f"{p.variant}, TORCH_CUDA_ARCH_LIST {p.torch_cuda_arch_list or '-'}")
    for k, v in env.items():
        o.print(f"  {k}={v}")
