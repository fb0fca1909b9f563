"""The bisect spec: a TOML file validated by pydantic, with CLI overrides.

Unknown keys and wrong types are errors that name the key (``SpecError``).
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vllm_bisect.errors import SpecError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BuildKind(StrEnum):
    SOURCE = "source"
    WHEEL = "wheel"
    IMAGE = "image"
    COMMAND = "command"
    URL = "url"


class Endpoint(StrEnum):
    COMPLETIONS = "completions"
    CHAT = "chat"


class Symptom(StrEnum):
    LENGTH = "length"
    ITL = "itl"
    CORRECTNESS = "correctness"  # greedy output differs from the good endpoint's
    THROUGHPUT = "throughput"    # output tok/s under probe.load fell
    MTP_SPEEDUP = "mtp-speedup"  # speculative vs plain decode speed fell below a floor
    CRASH = "crash"              # the server died or the probe failed (instead of a skip)
    ANY = "any"                  # length or itl


class SearchKind(StrEnum):
    """regression: old = good, new = bad, find the first bad commit. fix: old = has the
    problem, new = fixed, find the first fixed commit (``git bisect terms`` inverted)."""

    REGRESSION = "regression"
    FIX = "fix"


class RangeSpec(_Model):
    repo: str = "."
    good: str | None = None  # the old end (search = "fix": a commit that has the problem)
    bad: str | None = None   # the new end (search = "fix": a commit where it is fixed)
    first_parent: bool = True
    search: SearchKind = SearchKind.REGRESSION


DEFAULT_TAGS = (
    "public.ecr.aws/q9t5s3a7/vllm-release-repo:{sha}-{arch}-{variant}",
    "public.ecr.aws/q9t5s3a7/vllm-release-repo:{sha}-{arch}",
    "public.ecr.aws/q9t5s3a7/vllm-ci-postmerge-repo:{sha}{arm64_suffix}",
    "vllm/vllm-openai:nightly-{sha}",
)


class BuildSpec(_Model):
    kind: BuildKind = BuildKind.SOURCE
    # command builder
    setup: str | None = None
    serve: str | None = None
    # url builder
    url: str | None = None
    # source builder (python is also the wheel builder's venv interpreter)
    python: str | None = None
    precompiled: bool = False
    full_build: bool = True
    install_args: list[str] = Field(default_factory=list)
    # prefetch the next possible commits' artifacts while one is probed (None: on for
    # wheel and image builds, whose cost is I/O; off for source builds, which compete with
    # the probe for CPU)
    prefetch: bool | None = None
    # artifact cache size cap, LRU eviction that keeps the session's endpoints ("200G")
    cache_max_size: str | None = None
    # wheel builder (and the precompiled source build's wheel lookup)
    index_url: str = "https://wheels.vllm.ai"
    variant: Literal["auto", "default", "cu129", "cu130", "cpu"] = "auto"
    # image builder
    tags: list[str] = Field(default_factory=lambda: list(DEFAULT_TAGS))
    platform: Literal["auto", "linux/amd64", "linux/arm64"] = "auto"
    build: bool = False
    gpus: str | list[int] = "all"
    network: Literal["host", "bridge"] = "host"
    shm_size: str | None = None
    hf_cache: str | None = "~/.cache/huggingface"

    def prefetch_enabled(self) -> bool:
        if self.prefetch is not None:
            return self.prefetch
        return self.kind in (BuildKind.WHEEL, BuildKind.IMAGE)

    @model_validator(mode="after")
    def _check_kind(self) -> BuildSpec:
        if self.kind is BuildKind.COMMAND and not self.serve:
            raise ValueError('build.kind = "command" needs build.serve (a shell command with {port})')
        if self.kind is BuildKind.URL and not self.url:
            raise ValueError('build.kind = "url" needs build.url (e.g. "http://127.0.0.1:8000")')
        return self


class SpeculativeSpec(_Model):
    model_config = ConfigDict(extra="allow", frozen=True)
    method: str = "mtp"
    num_speculative_tokens: int = Field(default=3, ge=1, le=64)


class ServeSpec(_Model):
    model: str = "facebook/opt-125m"
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # names taken from the driver's environment although they look like credentials, for
    # servers and benchmarks (e.g. ["HF_TOKEN"] for a gated model); nothing else that looks
    # like one ever reaches a child (runtime/childenv.py); not in the cache key
    pass_env: list[str] = Field(default_factory=list)
    startup_timeout_s: float = Field(default=900.0, gt=0)
    # One server start-up at a time per GPU set on this host (vLLM's memory profiling
    # counts another starting server's memory against itself).
    serialize_startup: bool = True
    speculative: SpeculativeSpec | None = None
    # a server that dies or a probe that fails (not an unbuildable commit) is tried again on
    # a fresh server this many times before the commit counts as a skip; not with
    # verdict.symptom = "crash", where the failure is the symptom (not in the cache key)
    retries: int = Field(default=2, ge=0, le=10)

    def speculative_config_json(self) -> str | None:
        if self.speculative is None:
            return None
        return json.dumps(self.speculative.model_dump(), separators=(",", ":"))


class LoadSpec(_Model):
    """A closed-loop load. ``concurrency`` and ``context`` (prompt tokens; None: the probe's
    prompt) may be lists: the load then runs once per (concurrency, context) cell, in that
    order, each with ``requests`` requests (at least ``concurrency``)."""

    concurrency: int | list[int] = Field(default=8)
    requests: int = Field(default=32, ge=1, le=100000)
    max_tokens: int = Field(default=256, ge=2)
    context: int | list[int] | None = None

    @model_validator(mode="after")
    def _check_grid(self) -> LoadSpec:
        for c in self.concurrencies:
            if not 1 <= c <= 1024:
                raise ValueError(f"concurrency must be in 1..1024, got {c}")
        for n in self.contexts:
            if n is not None and n < 1:
                raise ValueError(f"context must be a positive number of tokens, got {n}")
        if isinstance(self.concurrency, list) and not self.concurrency:
            raise ValueError("concurrency: give at least one value")
        if isinstance(self.context, list) and not self.context:
            raise ValueError("context: give at least one value (or leave it out)")
        return self

    @property
    def concurrencies(self) -> list[int]:
        return list(self.concurrency) if isinstance(self.concurrency, list) else [self.concurrency]

    @property
    def contexts(self) -> list[int | None]:
        if self.context is None:
            return [None]
        return list(self.context) if isinstance(self.context, list) else [self.context]

    def cells(self) -> list[LoadSpec]:
        """One single-valued LoadSpec per (concurrency, context), concurrency-major."""
        return [self.model_copy(update={"concurrency": c, "context": n,
                                        "requests": max(self.requests, c)})
                for c in self.concurrencies for n in self.contexts]

    @property
    def single_concurrency(self) -> int:
        return self.concurrencies[0]

    @property
    def single_context(self) -> int | None:
        return self.contexts[0]


class BenchSpec(_Model):
    """vLLM's own benchmark, run with the artifact's vllm: "serve" against the running
    server (`--save-result`), or "throughput" offline after the server is down
    (`--output-json`). args: its dataset flags, e.g. ["--dataset-name", "random",
    "--random-input-len", "1024", "--random-output-len", "256", "--num-prompts", "64"]."""

    kind: Literal["serve", "throughput"] = "serve"
    args: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=1800.0, gt=0)


class ProbeSpec(_Model):
    kind: Literal["decode"] = "decode"
    endpoint: Endpoint = Endpoint.COMPLETIONS
    prompt: str = "Write a long story about a lighthouse keeper who finds a map."
    # about this many prompt tokens: the prompt is repeated and cut to size with the served
    # model's own tokenizer (POST /tokenize); usage.prompt_tokens is checked against it
    prompt_tokens: int | None = Field(default=None, ge=1)
    requests: int = Field(default=3, ge=1, le=1000)
    concurrency: int = Field(default=1, ge=1, le=256)
    max_tokens: int | None = Field(default=512, ge=1)
    send_max_tokens: bool = True
    ignore_eos: bool = True
    min_tokens: int | None = Field(default=None, ge=0)
    temperature: float = Field(default=0.0, ge=0.0)
    warmup: int = Field(default=1, ge=0, le=100)
    request_timeout_s: float = Field(default=600.0, gt=0)
    # the total time one request may take: request_deadline_s if set, else
    # request_timeout_s + (max_tokens or 16384) / min_tokens_per_s (a stream slower than
    # that pace, or one that never ends, is a probe error: the commit is skipped)
    request_deadline_s: float | None = Field(default=None, gt=0)
    min_tokens_per_s: float = Field(default=1.0, gt=0)
    # [probe.load]: a closed-loop load after the decode probe (output tok/s, TPOT)
    load: LoadSpec | None = None
    # [probe.mtp_speedup]: the same load with speculative decoding and, on a second server,
    # without it; the ratio of output tok/s is the MTP speed-up
    mtp_speedup: LoadSpec | None = None
    # [probe.bench]: `vllm bench serve` or `vllm bench throughput` (output tok/s)
    bench: BenchSpec | None = None

    def deadline_s(self, max_tokens: int | None) -> float:
        """The total deadline of one request that asks for ``max_tokens`` (None: unbounded)."""
        if self.request_deadline_s is not None:
            return self.request_deadline_s
        return self.request_timeout_s + (max_tokens or 16384) / self.min_tokens_per_s

    def effective_min_tokens(self) -> int | None:
        if self.min_tokens is not None:
            return self.min_tokens
        return self.max_tokens if self.send_max_tokens else None


class VerdictSpec(_Model):
    symptom: Symptom = Symptom.ANY
    min_output_tokens: int | None = Field(default=None, ge=1)
    max_itl_ms: float | None = Field(default=None, gt=0)
    itl_factor: float | None = Field(default=None, gt=1.0)
    # "sequential": calibrate both endpoints with calibration_samples requests each, then
    # judge each commit by a sequential probability ratio test on per-request ITL, sampling
    # more on the same server until it decides (max_samples: undecided -> skip); alpha bounds
    # the chance of any mislabel over the whole bisect. Needs symptom = "itl".
    # "bayes": for flaky symptoms (a crash, a cap in some runs only): run both endpoints
    # calibration_runs times to learn how often the symptom shows, keep a posterior over the
    # culprit, run the commit with the largest expected information gain (again if need be),
    # stop when one commit holds `confidence` of it (or after max_runs)
    strategy: Literal["threshold", "sequential", "bayes"] = "threshold"
    confidence: float = Field(default=0.99, gt=0.5, lt=1.0)
    calibration_runs: int = Field(default=4, ge=1, le=100)
    max_runs: int = Field(default=60, ge=1, le=10000)
    calibration_samples: int = Field(default=5, ge=5, le=400)
    max_samples: int = Field(default=40, ge=3, le=1000)
    alpha: float = Field(default=0.01, gt=0.0, lt=0.5)
    min_effect: float = Field(default=0.05, ge=0.0)
    # throughput: bad when output tok/s < the good endpoint's / throughput_factor, or below
    # min_throughput_tok_s
    throughput_factor: float | None = Field(default=None, gt=1.0)
    min_throughput_tok_s: float | None = Field(default=None, gt=0)
    # mtp-speedup: bad when speculative / plain output tok/s < min_mtp_speedup (e.g. 1.5)
    min_mtp_speedup: float | None = Field(default=None, gt=0)
    # once the culprit is found, re-measure it and its parent on fresh servers with this many
    # requests each; the report's effect and its 95% CI come from these samples (0: skip)
    verify_samples: int = Field(default=10, ge=0, le=1000)


class ExecutorKind(StrEnum):
    LOCAL = "local"
    RAY = "ray"


class ParallelSpec(_Model):
    """How many commits to test at once, and where. Not part of the measurement key: a
    commit measured by any worker is the same measurement."""

    # workers on this host (without gpus: that many simulator or CPU workers)
    workers: int = Field(default=1, ge=1, le=64)
    # "auto", "0,1,2,3" or [0, 1, 2, 3]: each worker gets gpus_per_probe of them
    gpus: str | list[int] | None = None
    gpus_per_probe: int = Field(default=1, ge=1, le=64)
    executor: ExecutorKind = ExecutorKind.LOCAL
    # Ray: "auto" (a running cluster), "ray://host:port", or None (start a local one)
    ray_address: str | None = None
    # custom resources each evaluation needs, e.g. {"arch_aarch64": 1} or {"sm_121": 1}
    ray_resources: dict[str, float] = Field(default_factory=dict)


class BisectSpec(_Model):
    range: RangeSpec = Field(default_factory=RangeSpec)
    parallel: ParallelSpec = Field(default_factory=ParallelSpec)
    build: BuildSpec = Field(default_factory=BuildSpec)
    serve: ServeSpec = Field(default_factory=ServeSpec)
    probe: ProbeSpec = Field(default_factory=ProbeSpec)
    verdict: VerdictSpec = Field(default_factory=VerdictSpec)

    @model_validator(mode="after")
    def _check_verdict(self) -> BisectSpec:
        v = self.verdict
        if self.range.search is SearchKind.FIX and v.strategy == "bayes":
            raise ValueError('range.search = "fix" works with the threshold and sequential '
                             'strategies, not "bayes"')
        if v.strategy == "sequential" and v.symptom is not Symptom.ITL:
            raise ValueError('verdict.strategy = "sequential" needs verdict.symptom = "itl"')
        if (v.symptom is Symptom.ITL and v.strategy == "threshold" and v.max_itl_ms is None
                and v.itl_factor is None):
            raise ValueError('verdict.symptom = "itl" needs verdict.max_itl_ms or verdict.itl_factor')
        if v.symptom is Symptom.THROUGHPUT and (
                (self.probe.load is None and self.probe.bench is None)
                or (v.throughput_factor is None and v.min_throughput_tok_s is None)):
            raise ValueError('verdict.symptom = "throughput" needs [probe.load] or '
                             "[probe.bench], and verdict.throughput_factor or "
                             "verdict.min_throughput_tok_s")
        if v.symptom is Symptom.MTP_SPEEDUP and (
                self.probe.mtp_speedup is None or v.min_mtp_speedup is None
                or self.serve.speculative is None):
            raise ValueError('verdict.symptom = "mtp-speedup" needs [probe.mtp_speedup], '
                             "verdict.min_mtp_speedup and [serve.speculative]")
        if v.symptom is Symptom.CORRECTNESS and self.probe.temperature != 0.0:
            raise ValueError('verdict.symptom = "correctness" compares greedy outputs: it needs '
                             "probe.temperature = 0")
        if v.symptom is Symptom.LENGTH and self.min_output_tokens() is None:
            raise ValueError(
                "verdict.symptom = \"length\" needs verdict.min_output_tokens when the probe "
                "sends no max_tokens"
            )
        return self

    def min_output_tokens(self) -> int | None:
        if self.verdict.min_output_tokens is not None:
            return self.verdict.min_output_tokens
        return self.probe.max_tokens if self.probe.send_max_tokens else None

    def measurement_key(self, commit: str) -> str:
        """Cache key of a measurement: (commit, build, serve, probe). The verdict is not in it."""
        payload = {
            "commit": commit,
            "build": self.build.model_dump(mode="json"),
            "serve": self.serve.model_dump(mode="json", exclude={"retries", "pass_env"}),
            "probe": self.probe.model_dump(  # (bounds on a hostile server change no result)
                mode="json", exclude={"request_deadline_s", "min_tokens_per_s"}),
        }
        blob = json.dumps(payload, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    def with_overrides(self, **sections: dict[str, Any]) -> BisectSpec:
        """Return a copy with keys of sections replaced (None values are ignored)."""
        data = self.model_dump(mode="json", exclude_unset=False)
        for section, values in sections.items():
            for key, value in values.items():
                if value is not None:
                    data[section][key] = value
        return parse_spec(data, source="command-line flags")


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid spec ({source}):"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key")
        else:
            lines.append(f"  {loc}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_spec(data: dict[str, Any], *, source: str = "spec") -> BisectSpec:
    try:
        return BisectSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(
            _format_validation_error(err, source),
            hint="fix the key(s) named above; `vllm-bisect --help` and the README list every key",
        ) from None


def load_spec(path: Path) -> BisectSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {path}", hint="pass an existing TOML file to --spec") from None
    except OSError as err:
        raise SpecError(f"cannot read spec file {path}: {err.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"spec file {path} is not valid TOML: {err}",
                        hint="check the line named above") from None
    return parse_spec(data, source=str(path))


def dump_spec(spec: BisectSpec) -> str:
    """Serialize a spec as TOML (flat enough for the spec's shape)."""
    data = spec.model_dump(mode="json", exclude_none=True)
    out: list[str] = []
    for section, values in data.items():
        nested = {k: v for k, v in values.items() if isinstance(v, dict)}
        out.append(f"[{section}]")
        for key, value in values.items():
            if key not in nested:
                out.append(f"{key} = {_toml_value(value)}")
        for key, value in nested.items():
            out.append(f"{key} = {_toml_value(value)}")
        out.append("")
    return "\n".join(out)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
