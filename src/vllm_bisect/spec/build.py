"""The spec's ``[build]`` section: one pydantic model per artifact kind, chosen by ``kind``.

``build.kind`` picks the model (a discriminated union); a key that belongs to another kind
is an error naming both ("build.tags is an image option; build.kind is wheel"). Everything
in a build model is part of the measurement key; operational knobs live in ``[ops]``
(:class:`vllm_bisect.spec.OpsSpec`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Model(BaseModel):
    # no inf or nan anywhere in a spec (TOML allows both): a deadline of inf killed the
    # watchdog thread (OverflowError) and the run hung
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ArtifactKind(StrEnum):
    """How a commit becomes something servable: the spec's ``build.kind`` and an artifact's kind."""

    SOURCE = "source"
    WHEEL = "wheel"
    IMAGE = "image"
    COMMAND = "command"
    URL = "url"


DEFAULT_KIND = ArtifactKind.SOURCE
Variant = Literal["auto", "default", "cu129", "cu130", "cpu"]

DEFAULT_TAGS = (
    "public.ecr.aws/q9t5s3a7/vllm-release-repo:{sha}-{arch}-{variant}",
    "public.ecr.aws/q9t5s3a7/vllm-release-repo:{sha}-{arch}",
    "public.ecr.aws/q9t5s3a7/vllm-ci-postmerge-repo:{sha}{arm64_suffix}",
    "vllm/vllm-openai:nightly-{sha}",
)


class WheelBuild(_Model):
    """A per-commit wheel from ``index_url`` installed into a per-commit venv."""

    kind: Literal[ArtifactKind.WHEEL] = ArtifactKind.WHEEL
    index_url: str = "https://wheels.vllm.ai"
    variant: Variant = "auto"
    # a local wheel (path or URL) whose compiled parts every commit reuses
    # (VLLM_PRECOMPILED_WHEEL_LOCATION): no index lookup; wheel_commit is the git ref whose
    # compiled sources it holds (default: range.good), so a commit that changed csrc/ since
    # then is a skip, not a silent stale binary
    wheel_location: str | None = None
    wheel_commit: str | None = None
    # reuse the interpreter's installed packages (torch, the build requirements, vLLM's
    # dependencies): a venv with --system-site-packages, no build isolation, --no-deps
    reuse_installed: bool = False
    editable: bool = False
    python: str | None = None  # the venv's interpreter (default: the running one)


class SourceBuild(_Model):
    """``pip install`` of the commit's checkout (precompiled: reuse a wheel's compiled parts)."""

    kind: Literal[ArtifactKind.SOURCE] = ArtifactKind.SOURCE
    python: str | None = None
    precompiled: bool = False
    full_build: bool = True
    install_args: list[str] = Field(default_factory=list)
    # the precompiled build's wheel lookup
    index_url: str = "https://wheels.vllm.ai"
    variant: Variant = "auto"
    # a local wheel (path or URL) whose compiled parts every commit reuses
    # (VLLM_PRECOMPILED_WHEEL_LOCATION): no index lookup; wheel_commit is the git ref whose
    # compiled sources it holds (default: range.good), so a commit that changed csrc/ since
    # then is a skip, not a silent stale binary
    wheel_location: str | None = None
    wheel_commit: str | None = None
    # reuse the interpreter's installed packages (torch, the build requirements, vLLM's
    # dependencies): a venv with --system-site-packages, no build isolation, --no-deps
    reuse_installed: bool = False
    editable: bool = False


class ImageBuild(_Model):
    """A per-commit container image, pulled by tag (or built from the commit's Dockerfile)."""

    kind: Literal[ArtifactKind.IMAGE] = ArtifactKind.IMAGE
    tags: list[str] = Field(default_factory=lambda: list(DEFAULT_TAGS))
    platform: Literal["auto", "linux/amd64", "linux/arm64"] = "auto"
    variant: Variant = "auto"  # the tags' {variant} (auto: from the host's CUDA)
    build: bool = False
    precompiled: bool = False  # docker build: VLLM_USE_PRECOMPILED=1
    gpus: str | list[int] = "all"
    network: Literal["host", "bridge"] = "host"
    shm_size: str | None = None


class _Needs(_Model):
    """A build kind with one key it cannot do without (named in ``needs``: key, example)."""

    needs: ClassVar[tuple[str, str]] = ("", "")

    @model_validator(mode="before")
    @classmethod
    def _check_needs(cls, data: Any) -> Any:
        key, example = cls.needs
        if isinstance(data, dict) and not data.get(key):
            kind = data.get("kind")
            raise ValueError(f'build.kind = "{kind}" needs build.{key} ({example})')
        return data


class CommandBuild(_Needs):
    """A shell line that serves the commit's checkout (``{port} {model} {commit}``)."""

    needs = ("serve", "a shell command with {port}")
    kind: Literal[ArtifactKind.COMMAND] = ArtifactKind.COMMAND
    setup: str | None = None
    serve: str


class UrlBuild(_Needs):
    """An already-running server (every commit is the same server: for probing a fixed one)."""

    needs = ("url", 'e.g. "http://127.0.0.1:8000"')
    kind: Literal[ArtifactKind.URL] = ArtifactKind.URL
    url: str


AnyBuild = WheelBuild | SourceBuild | ImageBuild | CommandBuild | UrlBuild
BuildSpec = Annotated[AnyBuild, Field(discriminator="kind")]

BUILD_MODELS: dict[ArtifactKind, type[_Model]] = {
    ArtifactKind.WHEEL: WheelBuild, ArtifactKind.SOURCE: SourceBuild,
    ArtifactKind.IMAGE: ImageBuild, ArtifactKind.COMMAND: CommandBuild,
    ArtifactKind.URL: UrlBuild,
}

# keys that left a section for [ops] (they do not change a measurement)
MOVED = {
    ("serve", "startup_timeout_s"): "ops.startup_timeout_s",
    ("serve", "serialize_startup"): "ops.serialize_startup",
    ("serve", "retries"): "ops.retries",
    ("probe", "request_timeout_s"): "ops.request_timeout_s",
    ("probe", "request_deadline_s"): "ops.request_deadline_s",
    ("probe", "min_tokens_per_s"): "ops.min_tokens_per_s",
    ("build", "prefetch"): "ops.prefetch",
    ("build", "cache_max_size"): "ops.cache_max_size",
    ("build", "hf_cache"): "ops.hf_cache",
}
MOVED_BENCH_TIMEOUT = ("probe.bench.timeout_s", "ops.bench_timeout_s")


def layout_errors(data: dict[str, Any]) -> list[str]:
    """Keys in an old location or under another build kind, each as one line naming the fix."""
    lines = []
    for (section, key), new in MOVED.items():
        sec = data.get(section)
        if isinstance(sec, dict) and key in sec:
            lines.append(f"  {section}.{key} moved to {new} (operational knobs are in [ops], "
                         "outside the measurement key)")
    probe = data.get("probe")
    bench = probe.get("bench") if isinstance(probe, dict) else None
    if isinstance(bench, dict) and "timeout_s" in bench:
        lines.append(f"  {MOVED_BENCH_TIMEOUT[0]} moved to {MOVED_BENCH_TIMEOUT[1]}")
    build = data.get("build")
    if isinstance(build, dict):
        lines += _misplaced_build_keys(build)
    return lines


def migrate_stored(data: dict[str, Any]) -> dict[str, Any]:
    """A spec as an earlier version stored it in a session (every build key of every kind,
    operational knobs in their old sections) in today's layout, so the session resumes."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    ops = dict(data.get("ops") or {})
    for (section, key), new in MOVED.items():
        sec = data.get(section)
        if isinstance(sec, dict) and key in sec:
            ops[new.split(".", 1)[1]] = sec.pop(key)
    bench = (data.get("probe") or {}).get("bench")
    if isinstance(bench, dict) and "timeout_s" in bench:
        data["probe"]["bench"] = {k: v for k, v in bench.items() if k != "timeout_s"}
        ops["bench_timeout_s"] = bench["timeout_s"]
    build = data.get("build")
    if isinstance(build, dict):
        try:
            own = BUILD_MODELS[ArtifactKind(build.get("kind", DEFAULT_KIND))].model_fields
        except ValueError:
            own = {}
        data["build"] = {k: v for k, v in build.items() if k in own or not own}
    if ops:
        data["ops"] = ops
    return data


def _misplaced_build_keys(build: dict[str, Any]) -> list[str]:
    try:
        kind = ArtifactKind(build.get("kind", DEFAULT_KIND))
    except ValueError:
        return []  # pydantic names the bad kind
    own = BUILD_MODELS[kind].model_fields
    lines = []
    for key in build:
        if key in own or (("build", key) in MOVED):
            continue
        owners = [k.value for k, m in BUILD_MODELS.items() if key in m.model_fields]
        if owners:
            lines.append(f"  build.{key} is {_article(owners[0])} {'/'.join(owners)} option; "
                         f"build.kind is {kind.value}")
    return lines


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def served_name(args: list[str], model: str) -> str:
    """The model name requests ask for: the first name ``--served-model-name`` gives in a
    server's ``args`` (``--served-model-name NAME ...`` or ``=NAME``, as vLLM reads it), else
    ``model``."""
    for i, arg in enumerate(args):
        name = (arg.partition("=")[2] if arg.startswith("--served-model-name=") else
                args[i + 1] if arg == "--served-model-name" and i + 1 < len(args) else "")
        if name and not name.startswith("-"):
            return name
    return model
