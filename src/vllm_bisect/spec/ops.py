"""The spec's ``[ops]``, ``[parallel]`` and ``[explain]`` tables: how a run is operated, where
commits are tested, and the profile at the end. None of them is in the measurement key.
Re-exported by ``vllm_bisect.spec``."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from vllm_bisect.spec.build import _Model

__all__ = ["MAX_DURATION_S", "SIZE_PATTERN", "ExecutorKind", "ExplainSpec", "OpsSpec",
           "ParallelSpec"]


# the longest any one deadline of the spec may be (a week): a duration is finite and bounded
# at load (1e308 overflowed the watchdog's timer)
MAX_DURATION_S = 7 * 24 * 3600.0
SIZE_PATTERN = r"^\s*\d+(\.\d+)?\s*[KkMmGgTt]?[Bb]?\s*$"  # "4G", "500M", "1024"


class ExplainSpec(_Model):
    """``vllm-bisect explain``: the culprit's profile against its parent's."""

    # run it at the end of ``run`` when a single culprit was found
    profile: bool = False
    # profiled server starts per side (the run-to-run spread needs at least 2)
    servers_per_side: int = Field(default=2, ge=1, le=8)
    # the profiled probe: at most this many requests of at most this many tokens (the diff
    # is per decode step; vLLM's /stop_profile time grows with the events recorded:
    # docs/design-notes.md)
    profile_requests: int = Field(default=1, ge=1, le=1000)
    profile_max_tokens: int = Field(default=128, ge=1)


class OpsSpec(_Model):
    """``[ops]``: how a run is operated. Nothing here changes a measurement, so nothing here
    is in the measurement key: change any of it and cached measurements are reused."""

    # seconds until a started server must answer /health
    startup_timeout_s: float = Field(default=900.0, gt=0, le=MAX_DURATION_S)
    # seconds a probe request may wait for its next bytes before it counts as hung
    request_timeout_s: float = Field(default=600.0, gt=0, le=MAX_DURATION_S)
    # the total time one request may take: request_deadline_s if set, else
    # request_timeout_s + (max_tokens or 16384) / min_tokens_per_s (a stream slower than
    # that pace, or one that never ends, is a probe error: the commit is skipped)
    request_deadline_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    min_tokens_per_s: float = Field(default=1.0, ge=0.001)
    # seconds `vllm bench` may run ([probe.bench])
    bench_timeout_s: float = Field(default=1800.0, gt=0, le=MAX_DURATION_S)
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
    download_deadline_s: float = Field(default=3600.0, gt=0, le=MAX_DURATION_S)
    index_deadline_s: float = Field(default=120.0, gt=0, le=MAX_DURATION_S)
    # the largest wheel downloaded, and what it may unpack to (vLLM's wheels are well under
    # both): a larger one is refused before anything of it is installed
    max_wheel_size: str = Field(default="4G", pattern=SIZE_PATTERN)
    max_unpacked_size: str = Field(default="16G", pattern=SIZE_PATTERN)


    def deadline_s(self, max_tokens: int | None) -> float:
        """The total deadline of one request that asks for ``max_tokens`` (None: unbounded)."""
        if self.request_deadline_s is not None:
            return self.request_deadline_s
        return min(MAX_DURATION_S,
                   self.request_timeout_s + (max_tokens or 16384) / self.min_tokens_per_s)

    def deadline_text(self, max_tokens: int | None) -> str:
        """:meth:`deadline_s` and where it comes from, in words (printed when a run or a
        bisect's first hook call starts: a deadline of days is then seen at once)."""
        total = self.deadline_s(max_tokens)
        if self.request_deadline_s is not None:
            return f"each probe request's deadline: {total:.0f} s (ops.request_deadline_s)"
        tokens = f"{max_tokens} tokens" if max_tokens else "16384 tokens (no max_tokens sent)"
        capped = " (capped at a week)" if total >= MAX_DURATION_S else ""
        return (f"each probe request's deadline: {total:.0f} s{capped} = "
                f"ops.request_timeout_s {self.request_timeout_s:g} s + {tokens} at "
                f"ops.min_tokens_per_s {self.min_tokens_per_s:g}/s (set ops.request_deadline_s "
                "or ops.min_tokens_per_s to change it)")


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
