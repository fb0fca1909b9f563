"""Builders: ``prepare(commit) -> Artifact`` for source, command and url artifacts."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import git

from vllm_bisect.builders.base import Artifact, ArtifactKind, Builder
from vllm_bisect.builders.cache import ArtifactCache
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.builders.command import CommandBuilder
from vllm_bisect.builders.source import SourceBuilder
from vllm_bisect.builders.url import UrlBuilder
from vllm_bisect.spec import BisectSpec, CommandBuild, ImageBuild, SourceBuild, UrlBuild, WheelBuild

__all__ = ["Artifact", "ArtifactKind", "Builder", "make_builder"]


def artifact_cache(spec: BisectSpec, repo: git.Repo, cache_dir: Path) -> ArtifactCache:
    """The artifact cache with the spec's size cap; the range's endpoints are never evicted."""
    from vllm_bisect.builders.cache import parse_size

    limit = parse_size(spec.ops.cache_max_size) if spec.ops.cache_max_size else None
    cache = ArtifactCache(cache_dir, max_bytes=limit)
    for ref in (spec.range.good, spec.range.bad):
        if ref:  # an unknown ref is reported by the range check, not here
            with contextlib.suppress(ValueError, git.BadName):
                cache.protect([repo.commit(ref).hexsha])
    return cache


def local_wheel_commit(repo: git.Repo, ref: str | None) -> str:
    """The full sha of the commit a local precompiled wheel was built from."""
    from vllm_bisect.errors import SpecError

    if not ref:
        raise SpecError("build.wheel_location needs build.wheel_commit (or range.good)")
    try:
        return repo.commit(ref).hexsha
    except (ValueError, git.BadName):
        raise SpecError(f"build.wheel_commit {ref!r} is not a commit of {repo.working_dir}") from None


def make_builder(spec: BisectSpec, repo: git.Repo, cache_dir: Path, log_dir: Path) -> Builder:
    b = spec.build
    if isinstance(b, UrlBuild):
        return UrlBuilder(b.url)
    if isinstance(b, WheelBuild):
        from vllm_bisect.builders.wheel import WheelBuilder

        return WheelBuilder(b, artifact_cache(spec, repo, cache_dir), log_dir)
    checkouts = Checkouts(repo, cache_dir)
    if isinstance(b, ImageBuild):
        from vllm_bisect.builders.image import ImageBuilder

        return ImageBuilder(b, artifact_cache(spec, repo, cache_dir), log_dir, checkouts=checkouts)
    if isinstance(b, CommandBuild):
        return CommandBuilder(checkouts, b.setup, b.serve, log_dir, env=dict(spec.serve.env))
    assert isinstance(b, SourceBuild)
    has_wheel: Callable[[str], bool] | None = None
    if b.precompiled and b.wheel_location is not None:
        base = local_wheel_commit(repo, b.wheel_commit or spec.range.good)
        has_wheel = base.__eq__
    elif b.precompiled:
        from vllm_bisect.builders.wheel_index import has_wheel_fn

        has_wheel = has_wheel_fn(b.index_url, b.variant)
    return SourceBuilder(checkouts, b, cache_dir, log_dir, has_wheel=has_wheel)
