"""Values that cross module seams: measurements, verdicts, outcomes (pydantic, frozen)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Verdict(StrEnum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


class Phase(StrEnum):
    """What a server start was for (result.json ``starts_by_phase``, the report's cost line).
    Plain ``git bisect run`` pays one server per commit it tests: ``search``, and the final
    step the search tests as ``confirm``."""

    ENDPOINTS = "endpoints"   # the endpoints verified or calibrated on
    SEARCH = "search"         # the search's steps (a commit's first server, and the further
    #                           servers its own test asks for)
    CONFIRM = "confirm"       # the final pair at the whole-bisect bound (a step the search
    #                           tests as "confirm", and its further servers)
    RECHECK = "re-check"      # auto on a cap: the culprit's parent again (bisect/recheck.py)
    VERIFY = "verify"         # the culprit and its parent on fresh servers
    REST = "rest"             # the rest checks, and the searches of a part they found worse


class TokensSource(StrEnum):
    USAGE = "usage"              # final include_usage chunk (server-counted)
    CONTINUOUS = "continuous"    # continuous_usage_stats on each chunk (server-counted)
    CHUNKS = "chunks"            # no usage at all: one token per chunk (a guess)


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _nulls_unavailable(data: Any, *fields: str) -> Any:
    """A journal row written before /metrics deltas were checked may hold a list with
    ``null`` in it (pydantic writes NaN and Inf as null): that value is "not available"
    (None), never a crash on reading the journal."""
    if not isinstance(data, dict):
        return data
    bad = [f for f in fields if isinstance(data.get(f), list) and None in data[f]]
    return {**data, **dict.fromkeys(bad)} if bad else data


class RequestResult(_Value):
    output_tokens: int
    finish_reason: str | None
    ttft_ms: float
    latency_ms: float
    itl_ms: float | None
    chunk_itl_ms: float | None
    tpot_ms: float | None
    n_chunks: int
    tokens_per_chunk: float
    chunk_tokens: list[int] | None = None
    tokens_source: TokensSource
    text_sha256: str | None = None   # of the generated text: greedy outputs can be compared
    prompt_tokens: int | None = None  # server-counted (usage.prompt_tokens)


class MemoryResult(_Value):
    """What a server said about memory at start-up (verdict/memory.py reads its log), and
    what NVML saw its processes hold once it was up."""

    kv_cache_tokens: int | None = None   # "GPU KV cache size: N tokens"
    kv_cache_gib: float | None = None    # "Available KV cache memory: X GiB"
    gpu_blocks: int | None = None        # "# GPU blocks: N" (older vLLM)
    weights_gib: float | None = None     # "Model loading took X GiB"
    gpu_used_mib: float | None = None    # NVML: the server's processes, after start-up
    lines: list[str] = Field(default_factory=list)  # the log lines these came from


class LoadResult(_Value):
    """A closed-loop load at one concurrency (probes.load)."""

    concurrency: int
    requests: int
    errors: int
    duration_s: float
    output_tokens: int
    output_tok_s: float            # all output tokens / wall time
    tpot_ms: float | None          # median per-request time per output token
    per_request_tok_s: list[float] = Field(default_factory=list)
    context_tokens: int | None = None          # the prompt size asked for (None: probe.prompt)
    prompt_tokens: int | None = None           # server-counted prompt tokens (median)
    acceptance_length: float | None = None     # from the /metrics deltas over this load
    acceptance_per_position: list[float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _unavailable(cls, data: Any) -> Any:
        return _nulls_unavailable(data, "acceptance_per_position")


class MtpCell(_Value):
    """One (concurrency, context) cell of an MTP speed-up grid: the same load with
    speculative decoding (``on``) and on a server without it (``off``)."""

    concurrency: int
    context_tokens: int | None
    on: LoadResult
    off: LoadResult | None = None
    speedup: float | None = None               # on / off output tok/s


class BenchResult(_Value):
    """What `vllm bench serve` or `vllm bench throughput` reported (probes.vllm_bench)."""

    tool: str                      # "serve" | "throughput"
    output_tok_s: float | None     # serve: output_throughput; throughput: its printed line
    total_tok_s: float | None = None
    requests_s: float | None = None
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    completed: int = 0
    failed: int = 0
    duration_s: float | None = None


class Measurement(_Value):
    """What the decode probe saw at one server (aggregates are medians over requests)."""

    endpoint: str
    model: str
    server_version: str | None = None
    requested_tokens: int | None
    min_output_tokens: int | None
    output_tokens: list[int]
    length_ok: bool
    itl_ms: float | None
    chunk_itl_ms: float | None
    tokens_per_chunk: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    finish_reasons: list[str | None]
    acceptance_length: float | None = None
    acceptance_per_position: list[float] | None = None
    server_itl_ms: float | None = None
    generation_tokens_delta: float | None = None
    tokens_source: TokensSource
    notes: list[str] = Field(default_factory=list)
    requests: list[RequestResult] = Field(default_factory=list)
    wall_s: float = 0.0
    load: LoadResult | None = None          # probe.load: throughput at a concurrency
    mtp_on: LoadResult | None = None        # probe.mtp_speedup: with speculative decoding
    # the GPUs before and after the probe (clocks, temperature, power, compute processes;
    # runtime/gpustate.py); contended: another process used a GPU meanwhile
    gpu_state: dict[str, Any] | None = None
    gpu_contended: bool = False
    mtp_off: LoadResult | None = None       # ... and on a second server without it
    mtp_speedup: float | None = None        # mtp_on / mtp_off output tok/s (the worst cell)
    load_cells: list[LoadResult] = Field(default_factory=list)  # probe.load over its grid
    mtp_cells: list[MtpCell] = Field(default_factory=list)      # probe.mtp_speedup's grid
    prompt_tokens: int | None = None        # server-counted prompt tokens (median)
    bench: BenchResult | None = None        # probe.bench: vLLM's own benchmark
    memory: MemoryResult | None = None      # verdict.symptom = "memory": the start-up's memory

    @model_validator(mode="before")
    @classmethod
    def _unavailable(cls, data: Any) -> Any:
        return _nulls_unavailable(data, "acceptance_per_position")


class Outcome(_Value):
    """A judged commit: its verdict, why, and what was measured (None when skipped)."""

    commit: str
    verdict: Verdict
    reason: str
    measurement: Measurement | None = None
    from_cache: bool = False
    # a skip's log and its tail, for the user interface to show the cause (never journaled)
    log: Path | None = None
    log_tail: str = ""


class EvalStatus(StrEnum):
    MEASURED = "measured"
    UNAVAILABLE = "unavailable"   # no artifact: cached, it will not appear on a retry
    FAILED = "failed"             # serve or probe failure at this commit
    CANCELLED = "cancelled"       # stopped because a verdict elsewhere made it useless:
    #                               never cached or journaled


class FailureKind(StrEnum):
    """Why an evaluation has no measurement, as the verdict rules need it (typed: the crash
    rule reads this, never the reason text)."""

    SERVE = "serve"          # the server died or never became healthy (ServeError)
    PROBE = "probe"          # the probe failed on a running server (ProbeError and its kinds)
    OTHER = "other"          # another recoverable error while measuring
    WRONG_MODEL = "wrong_model"  # the server serves another model (WrongModel): a skip
    INTERNAL = "internal"    # an unexpected exception (a bug): a skip, never a crash

    @property
    def crash(self) -> bool:
        """What the ``crash`` symptom counts: a server that died or a probe that failed."""
        return self in (FailureKind.SERVE, FailureKind.PROBE)


# how records written before ``failure`` existed said it: the error class in the reason
LEGACY_CRASH_MARKERS = {"ServeError": FailureKind.SERVE, "ProbeError": FailureKind.PROBE,
                        "StreamFormatError": FailureKind.PROBE}
TWO_LEVEL_SAMPLES = "two_level_samples"  # where older records kept Evaluation.samples


def legacy_failure(reason: str) -> FailureKind | None:
    """The failure a record written before the typed field meant (its reason's error class)."""
    return next((k for m, k in LEGACY_CRASH_MARKERS.items() if m in reason), None)


class Evaluation(_Value):
    """The result of trying to measure one commit (before any verdict). ``failure``: why it
    was not measured (FAILED); ``log``: the log to read about it; ``samples``: a two-level
    or changepoint policy's per-server samples (the symptom's natural scale: ms, tokens),
    one list per server."""

    commit: str
    status: EvalStatus
    reason: str = ""
    log_tail: str = ""
    measurement: Measurement | None = None
    artifact: str | None = None
    startup_s: float | None = None
    environment: dict[str, object] = Field(default_factory=dict)
    # UNAVAILABLE for a reason a later run may not meet (the index answered 5xx, timed out):
    # never cached across sessions, like FAILED
    transient: bool = False
    # UNAVAILABLE because the network failed (NetworkUnavailable): not the commit's fault
    network: bool = False
    failure: FailureKind | None = None
    log: Path | None = None
    samples: list[list[float]] | None = None
    hint: str = ""   # UNAVAILABLE: the builder's advice ("set build.full_build = true ...")

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        """Journals written before the typed fields: read failure, log and samples from
        where they were kept then (the reason text, the environment)."""
        if not isinstance(data, dict):
            return data
        reason = str(data.get("reason") or "")
        if data.get("status") == EvalStatus.FAILED and "failure" not in data:
            data = {**data, "failure": legacy_failure(reason)}
        if data.get("status") == EvalStatus.FAILED and "log" not in data and "log: " in reason:
            data = {**data, "log": reason.rpartition("log: ")[2].rstrip(")")}
        env = data.get("environment")
        if isinstance(env, dict) and TWO_LEVEL_SAMPLES in env and "samples" not in data:
            env = dict(env)
            data = {**data, "samples": env.pop(TWO_LEVEL_SAMPLES), "environment": env}
        return data


class Verification(_Value):
    """The culprit and its last good parent judged again once the search is over (their
    verdicts should repeat: bad and good): on fresh servers with more samples, or, when the
    search already judged both at the whole-bisect bound, from those servers (``source``)."""

    culprit: str
    parent: str
    samples: int
    culprit_verdict: Verdict
    parent_verdict: Verdict
    culprit_reason: str = ""
    parent_reason: str = ""
    culprit_measurement: Measurement | None = None
    parent_measurement: Measurement | None = None
    # the symptom's samples per server (a two-level test's servers; None: not kept): the rest
    # check starts from them with the search's (bisect/rest.py)
    culprit_servers: list[list[float]] | None = None
    parent_servers: list[list[float]] | None = None
    # "fresh": measured again on fresh servers (``samples`` requests asked for each; 0: the
    # two-level test chose them per server until it decided);
    # "confirmation": no fresh server: both verdicts were already reached at the whole-bisect
    # bound by the search's confirmation of the final pair, on the servers above;
    # "rechecks": no fresh server: a deterministic cap (auto's threshold search) showed at the
    # culprit, and its parent missed it in every one of ``parent_runs`` runs (the search's and
    # its re-checks)
    source: str = "fresh"
    culprit_runs: int = 0   # "rechecks": the runs behind each verdict
    parent_runs: int = 0

    @property
    def confirmed(self) -> bool:
        return self.culprit_verdict is Verdict.BAD and self.parent_verdict is Verdict.GOOD
