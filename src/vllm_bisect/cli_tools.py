"""Operator commands of the CLI: ``cache ls|prune``, ``env``, ``bot serve``.

Part of the CLI layer (with cli.py, the only modules that print or choose exit codes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from vllm_bisect.bisect.session import default_cache_dir
from vllm_bisect.cli import _fail, _setup_logging, app, out
from vllm_bisect.errors import BisectError, FatalError

cache_app = typer.Typer(help="Inspect and prune the artifact cache (venvs, wheels, images).")
app.add_typer(cache_app, name="cache")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


@cache_app.command("ls")
def cache_ls(
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """List cached artifacts, least recently used first."""
    from vllm_bisect.builders.cache import ArtifactCache

    cache = ArtifactCache(cache_dir or default_cache_dir())
    entries = cache.entries()
    if as_json:
        out.print_json(json.dumps({"total_bytes": sum(e.size for e in entries),
                                   "entries": [e.__dict__ for e in entries]}))
        return
    from rich.table import Table

    t = Table(title=f"artifact cache {cache.root}")
    for col in ("kind", "commit", "size", "last used", "location"):
        t.add_column(col)
    for e in entries:
        t.add_row(e.kind, (e.commit or "-")[:12], _human(e.size),
                  time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)), e.location)
    out.print(t)
    out.print(f"total {_human(sum(e.size for e in entries))} in {len(entries)} entries")


@cache_app.command("prune")
def cache_prune(
    max_size: Annotated[str, typer.Option(help="keep at most this much, e.g. 200G")] = "200G",
    keep: Annotated[list[str] | None, typer.Option(help="commits never evicted")] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="artifact and result cache")] = None,
) -> None:
    """Evict least-recently-used artifacts until the cache fits --max-size."""
    from vllm_bisect.builders.cache import ArtifactCache, parse_size

    try:
        limit = parse_size(max_size)
    except ValueError:
        _fail(FatalError(f"invalid --max-size {max_size!r}", hint="use e.g. 500M, 50G, 1T"))
    cache = ArtifactCache(cache_dir or default_cache_dir())

    def remove_image(ref: str) -> None:
        from vllm_bisect.builders.image import docker_client

        docker_client().images.remove(ref, force=True)

    evicted = cache.prune(limit, keep=keep or [], remove_image=remove_image)
    for e in evicted:
        out.print(f"evicted {e.kind} {(e.commit or '-')[:12]} {_human(e.size)} {e.location}")
    out.print(f"{len(evicted)} evicted; {_human(cache.total_size())} left (limit {max_size})")


@app.command("env")
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
        out.print_json(json.dumps(doc))
        return
    if not p.gpus:
        out.print("[yellow]no NVIDIA GPU found[/] (nvidia-smi missing or silent): "
                  "wheel variant defaults to cpu")
    for g in p.gpus:
        out.print(f"GPU {g.name}: compute capability {g.compute_capability} ({g.sm}"
                  f"{', ' + g.nickname if g.nickname else ''}), driver {g.driver}")
    out.print(f"CUDA (driver) {p.cuda_version or '-'}; {p.machine}; glibc "
              f"{doc['glibc'] or '-'}; docker {'yes' if p.docker else 'no'}; "
              f"nvidia container runtime {'yes' if p.nvidia_container_runtime else 'no'}")
    out.print(f"defaults: arch {p.arch}, docker platform {p.docker_platform}, wheel variant "
              f"{p.variant}, TORCH_CUDA_ARCH_LIST {p.torch_cuda_arch_list or '-'}")
    for k, v in env.items():
        out.print(f"  {k}={v}")


bot_app = typer.Typer(help="The GitHub bot that runs bisects on request.")
app.add_typer(bot_app, name="bot")


@bot_app.command("serve")
def bot_serve(
    config: Annotated[Path, typer.Option(help="bot config (TOML)")],
) -> None:
    """Serve the webhook (X-Hub-Signature-256 verified) and run queued bisects."""
    from vllm_bisect.bot import load_config, serve

    _setup_logging(False)
    try:
        cfg = load_config(config)
        cfg.secret()
        serve(cfg)
    except BisectError as e:
        _fail(e)




from vllm_bisect.isolate import commands as _studies  # noqa: E402  (isolate, deps, knobs)

del _studies
