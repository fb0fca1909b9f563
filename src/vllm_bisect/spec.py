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

from pydantic import ConfigDict, Field, ValidationError, model_validator

from vllm_bisect.errors import SpecError
from vllm_bisect.spec_build import (
    DEFAULT_KIND,
    DEFAULT_TAGS,
    ArtifactKind,
    BuildSpec,
    CommandBuild,
    ImageBuild,
    SourceBuild,
    UrlBuild,
    WheelBuild,
    _Model,
    layout_errors,
    migrate_stored,
)
from vllm_bisect.spec_keys import did_you_mean
from vllm_bisect.spec_load import BenchSpec, LoadSpec, dump_spec

__all__ = [
    "DEFAULT_TAGS",
    "ArtifactKind",
    "BenchSpec",
    "BisectSpec",
    "BuildSpec",
    "CommandBuild",
    "Endpoint",
    "ExecutorKind",
    "ImageBuild",
    "LoadSpec",
    "OpsSpec",
    "ProbeSpec",
    "SearchKind",
    "ServeSpec",
    "SourceBuild",
    "Strategy",
    "Symptom",
    "UrlBuild",
    "WheelBuild",
    "dump_spec",
    "load_spec",
    "parse_spec",
    "stored_spec",
]

# the measurement key's schema: bump it when what a key covers changes (old cache entries
# are then never matched again). 2: [ops] left the key; build is one model per kind.
KEY_VERSION = 2


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
    TTFT = "ttft"                # time to first token rose (probe.prompt_tokens: a long prefill)
    MEMORY = "memory"            # KV cache capacity fell / memory rose at start-up, or it OOMs
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
    # like one ever reaches a child (runtime/childenv.py); not in the measurement key
    pass_env: list[str] = Field(default_factory=list)
    speculative: SpeculativeSpec | None = None
    # pin the GPUs' SM clock for the session (nvidia-smi -lgc; reset with -rgc after; needs
    # root): to lock_clocks_mhz, else the lowest default applications clock (in the
    # measurement key only when on: locked clocks change what is measured)
    lock_clocks: bool = False
    lock_clocks_mhz: int | None = Field(default=None, ge=100, le=5000)

    def speculative_config_json(self) -> str | None:
        if self.speculative is None:
            return None
        return json.dumps(self.speculative.model_dump(), separators=(",", ":"))


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
    # [probe.load]: a closed-loop load after the decode probe (output tok/s, TPOT)
    load: LoadSpec | None = None
    # [probe.mtp_speedup]: the same load with speculative decoding and, on a second server,
    # without it; the ratio of output tok/s is the MTP speed-up
    mtp_speedup: LoadSpec | None = None
    # [probe.bench]: `vllm bench serve` or `vllm bench throughput` (output tok/s)
    bench: BenchSpec | None = None

    def effective_min_tokens(self) -> int | None:
        if self.min_tokens is not None:
            return self.min_tokens
        return self.max_tokens if self.send_max_tokens else None


class Strategy(StrEnum):
    """How commits are judged: one measurement against thresholds, a sequential test on
    per-request samples, or a posterior over the culprit for flaky symptoms."""

    AUTO = "auto"            # chosen from the symptom (see VerdictSpec.strategy)
    THRESHOLD = "threshold"
    SEQUENTIAL = "sequential"
    BAYES = "bayes"
    TWOLEVEL = "twolevel"


class VerdictSpec(_Model):
    symptom: Symptom = Symptom.ANY
    # several symptoms, one first-bad commit each, from the same measurements (bisect.multi;
    # empty: `symptom` alone). `symptom` becomes the first.
    symptoms: list[Symptom] = Field(default_factory=list)
    # after a culprit of itl / throughput / mtp-speedup: test the bad end against it with the
    # same noise-aware test and, when still clearly worse, bisect the rest (bisect.multi)
    rest_check: bool = True
    # two-level: a commit off the good end by the factor is BAD (a plateau between two steps;
    # at the final pair's bound it asks for the fall-back first: verdict/twolevel.py)
    plateau: bool = True
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
    # "twolevel": the two-level sequential test (a server level plus per-request noise):
    # at least two servers per endpoint, then per commit more requests or a fresh server,
    # whichever reduces the doubt more per cost, until the evidence is clear; itl_factor /
    # throughput_factor (else 1 + min_effect) is the smallest change that matters.
    # "auto" (the default): length, correctness -> threshold; crash -> bayes; itl,
    # throughput, mtp-speedup -> twolevel; any -> threshold
    strategy: Strategy = Strategy.AUTO
    # twolevel: a server start costs this many probe requests (picks requests vs servers)
    server_cost: float = Field(default=3.0, gt=0.0, le=1000.0)
    max_servers: int = Field(default=12, ge=1, le=100)
    confidence: float = Field(default=0.99, gt=0.5, lt=1.0)
    calibration_runs: int = Field(default=4, ge=1, le=100)
    # auto, length / correctness: the bad endpoint runs up to this many times (fresh servers)
    # until it shows the symptom (`run`: missed first, then shown -> bayes; the hook: until
    # shown and missed, some runs only -> refused) (1: no repeats and no re-checks, for a
    # symptom known to be deterministic)
    intermittent_runs: int = Field(default=8, ge=1, le=100)
    # auto, length / correctness under `run`: after the threshold search the culprit's
    # parent runs this many more times (a flaky symptom looks good); shown in any -> bayes.
    # 1 keeps a deterministic cap at plain bisect's cost + 3 server starts; raise it for a
    # symptom suspected flaky (docs/benchmarks.md prices 1, 2, 3)
    recheck_runs: int = Field(default=1, ge=0, le=100)
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
    # ttft: bad when time to first token > ttft_factor x the good endpoint's (or > max_ttft_ms)
    ttft_factor: float | None = Field(default=None, gt=1.0)
    max_ttft_ms: float | None = Field(default=None, gt=0)
    # memory: bad when the KV cache capacity (tokens) at start-up falls below the good
    # endpoint's / memory_factor, or weights / peak memory rise above its x memory_factor, or
    # the server runs out of memory starting (verdict/memory.py)
    memory_factor: float = Field(default=1.1, gt=1.0)
    # once the culprit is found, re-measure it and its parent on fresh servers with this many
    # requests each; the report's effect and its 95% CI come from these samples (0: skip)
    verify_samples: int = Field(default=10, ge=0, le=1000)


SIZE_PATTERN = r"^\s*\d+(\.\d+)?\s*[KkMmGgTt]?[Bb]?\s*$"  # "4G", "500M", "1024"


class ExplainSpec(_Model):
    """``vllm-bisect explain``: the culprit's profile against its parent's."""

    # run it at the end of ``run`` when a single culprit was found
    profile: bool = False
    # profiled server starts per side (the run-to-run spread needs at least 2)
    servers_per_side: int = Field(default=2, ge=1, le=8)


class OpsSpec(_Model):
    """``[ops]``: how a run is operated. Nothing here changes a measurement, so nothing here
    is in the measurement key: change any of it and cached measurements are reused."""

    # seconds until a started server must answer /health
    startup_timeout_s: float = Field(default=900.0, gt=0)
    # seconds a probe request may wait for its next bytes before it counts as hung
    request_timeout_s: float = Field(default=600.0, gt=0)
    # the total time one request may take: request_deadline_s if set, else
    # request_timeout_s + (max_tokens or 16384) / min_tokens_per_s (a stream slower than
    # that pace, or one that never ends, is a probe error: the commit is skipped)
    request_deadline_s: float | None = Field(default=None, gt=0)
    min_tokens_per_s: float = Field(default=1.0, gt=0)
    # seconds `vllm bench` may run ([probe.bench])
    bench_timeout_s: float = Field(default=1800.0, gt=0)
    # one server start-up at a time per GPU set on this host (vLLM's memory profiling
    # counts another starting server's memory against itself)
    serialize_startup: bool = True
    # a server that dies or a probe that fails (not an unbuildable commit) is tried again on
    # a fresh server this many times before the commit counts as a skip; not with
    # verdict.symptom = "crash", where the failure is the symptom
    retries: int = Field(default=2, ge=0, le=10)
    # prefetch the next possible commits' artifacts while one is probed (None: on for
    # wheel and image builds, whose cost is I/O; off for source builds, which compete with
    # the probe for CPU)
    prefetch: bool | None = None
    # artifact cache size cap, LRU eviction that keeps the session's endpoints ("200G")
    cache_max_size: str | None = None
    # image builds: the host's Hugging Face cache, mounted so weights load once ("": none)
    hf_cache: str = "~/.cache/huggingface"
    # network reads have a total deadline and a size cap, not only a per-read timeout (a
    # server that drips bytes or sends gigabytes is a skip, never a hang): seconds one wheel
    # download may take in all (a 500 MB wheel at 150 KB/s), one index page (metadata.json,
    # a PEP 503 page) in all
    download_deadline_s: float = Field(default=3600.0, gt=0)
    index_deadline_s: float = Field(default=120.0, gt=0)
    # the largest wheel downloaded, and what it may unpack to (vLLM's wheels are well under
    # both): a larger one is refused before anything of it is installed
    max_wheel_size: str = Field(default="4G", pattern=SIZE_PATTERN)
    max_unpacked_size: str = Field(default="16G", pattern=SIZE_PATTERN)


    def deadline_s(self, max_tokens: int | None) -> float:
        """The total deadline of one request that asks for ``max_tokens`` (None: unbounded)."""
        if self.request_deadline_s is not None:
            return self.request_deadline_s
        return self.request_timeout_s + (max_tokens or 16384) / self.min_tokens_per_s


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
    build: BuildSpec = Field(default_factory=SourceBuild)
    serve: ServeSpec = Field(default_factory=ServeSpec)
    probe: ProbeSpec = Field(default_factory=ProbeSpec)
    verdict: VerdictSpec = Field(default_factory=VerdictSpec)
    ops: OpsSpec = Field(default_factory=OpsSpec)
    explain: ExplainSpec = Field(default_factory=ExplainSpec)

    @model_validator(mode="before")
    @classmethod
    def _default_build_kind(cls, data: Any) -> Any:
        build = data.get("build") if isinstance(data, dict) else None
        if isinstance(build, dict) and "kind" not in build:
            data = {**data, "build": {**build, "kind": DEFAULT_KIND.value}}
        return data

    @model_validator(mode="after")
    def _check_verdict(self) -> BisectSpec:
        v = self.verdict
        if v.symptoms:  # issue 28: each symptom checked alone, `symptom` is the first
            for s in v.symptoms[1:]:
                _ = self.for_symptom(s)._check_verdict()  # type: ignore[operator]
            v = v.model_copy(update={"symptom": v.symptoms[0]})
            object.__setattr__(self, "verdict", v)
        if self.range.search is SearchKind.FIX and v.strategy is Strategy.BAYES:
            raise ValueError('range.search = "fix" works with the threshold and sequential '
                             'strategies, not "bayes"')
        if v.strategy is Strategy.SEQUENTIAL and v.symptom is not Symptom.ITL:
            raise ValueError('verdict.strategy = "sequential" needs verdict.symptom = "itl"')
        if v.strategy is Strategy.TWOLEVEL and v.symptom not in (
                Symptom.ITL, Symptom.THROUGHPUT, Symptom.MTP_SPEEDUP, Symptom.TTFT):
            raise ValueError('verdict.strategy = "twolevel" needs verdict.symptom = "itl", '
                             '"ttft", "throughput" or "mtp-speedup"')
        if (v.symptom is Symptom.TTFT and v.strategy is Strategy.THRESHOLD
                and v.max_ttft_ms is None and v.ttft_factor is None):
            raise ValueError('verdict.symptom = "ttft" needs verdict.max_ttft_ms or '
                             "verdict.ttft_factor")
        if (v.symptom is Symptom.ITL and v.strategy is Strategy.THRESHOLD and v.max_itl_ms is None
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
        if (any(s in (Symptom.ITL, Symptom.TTFT) for s in (v.symptom, *v.symptoms))
                and v.strategy in ("auto", "twolevel")
                and "requests" not in self.probe.model_fields_set):
            # the two-level test starts with one request and asks for more when they help
            object.__setattr__(self, "probe", self.probe.model_copy(update={"requests": 1}))
        if v.symptom is Symptom.LENGTH and self.min_output_tokens() is None:
            raise ValueError(
                "verdict.symptom = \"length\" needs verdict.min_output_tokens when the probe "
                "sends no max_tokens"
            )
        return self

    def symptom_list(self) -> list[Symptom]:
        """``verdict.symptoms``, else ``[verdict.symptom]``."""
        return list(self.verdict.symptoms) or [self.verdict.symptom]

    def for_symptom(self, symptom: Symptom) -> BisectSpec:
        """This spec judging one symptom (the probe, hence the measurement key, unchanged)."""
        v = self.verdict.model_copy(update={"symptom": symptom, "symptoms": []})
        return self.model_copy(update={"verdict": v})

    def min_output_tokens(self) -> int | None:
        if self.verdict.min_output_tokens is not None:
            return self.verdict.min_output_tokens
        return self.probe.max_tokens if self.probe.send_max_tokens else None

    def prefetch_enabled(self) -> bool:
        """ops.prefetch, or by default on where fetching an artifact is I/O (wheel, image)."""
        if self.ops.prefetch is not None:
            return self.ops.prefetch
        return self.build.kind in (ArtifactKind.WHEEL, ArtifactKind.IMAGE)

    def measurement_key(self, commit: str) -> str:
        """Cache key of a measurement: (commit, build, serve, probe). Neither the verdict nor
        [ops], [parallel] or [range] is in it. ``KEY_VERSION`` drops older caches' entries."""
        payload = {
            "v": KEY_VERSION,
            "commit": commit,
            "build": self.build.model_dump(mode="json"),
            "serve": self.serve.model_dump(mode="json", exclude={"pass_env"} | (
                set() if self.serve.lock_clocks else {"lock_clocks", "lock_clocks_mhz"})),
            "probe": self.probe.model_dump(mode="json"),
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
        parts = [str(p) for p in e["loc"]]
        if parts[:1] == ["build"] and len(parts) > 1 and parts[1] in set(ArtifactKind):
            del parts[1]  # the union's tag: build.wheel.tags -> build.tags
        loc = ".".join(parts) or "(top level)"
        if e["type"] == "extra_forbidden":
            guess = did_you_mean(loc, BisectSpec)
            lines.append(f"  {loc}: unknown key" + (f" (did you mean {guess}?)" if guess else ""))
        elif e["type"] == "union_tag_invalid":
            lines.append(f"  {loc}.kind: {e['input'].get('kind')!r} is not one of "
                         f"{', '.join(k.value for k in ArtifactKind)}")
        elif e["type"] == "value_error":
            lines.append(f"  {loc}: {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"  {loc}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


_HINT = "fix the key(s) named above; `vllm-bisect spec --keys` lists every key"


def parse_spec(data: dict[str, Any], *, source: str = "spec") -> BisectSpec:
    moved = layout_errors(data)
    if moved:
        raise SpecError("\n".join([f"invalid spec ({source}):", *moved]), hint=_HINT)
    try:
        return BisectSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_validation_error(err, source), hint=_HINT) from None


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


def stored_spec(text: str, *, source: str) -> BisectSpec:
    """A spec as a session journal stores it: JSON (exact, None kept), or TOML (older
    sessions)."""
    try:
        # JSON: this version; TOML: an earlier version's session, in its layout
        data = (json.loads(text) if text.lstrip().startswith("{")
                else migrate_stored(tomllib.loads(text)))
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as err:
        raise SpecError(f"the spec stored in {source} is unreadable: {err}",
                        hint="pass --spec FILE") from None
    return parse_spec(data, source=source)
