"""The simulated engine: what a request generates and how the engine paces it (pure).

The model is vLLM's V1 engine with speculative decoding: the prefill step emits one token;
each later engine step verifies K draft tokens and emits the accepted prefix plus one bonus
token (1..K+1 tokens, one streamed chunk). Without speculative decoding each step emits one
token. Steps are paced in real time by the server (``step_ms`` each).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

VOCAB = (
    "the", "lighthouse", "keeper", "found", "a", "map", "under", "stairs", "and", "sea",
    "was", "calm", "night", "light", "turned", "slowly", "over", "rocks", "ship", "came",
)


@dataclass(frozen=True)
class SimConfig:
    """Everything that decides how the simulated server behaves."""

    model: str = "sim-model"
    version: str = "0.25.1"
    max_model_len: int = 4096
    step_ms: float = 10.0
    prefill_ms: float = 20.0          # a prompt of up to 512 tokens; longer: proportionally
    spec_k: int = 0
    # memory at start-up (logged as vLLM 0.25.1 logs it; kv_cache_gib <= 0: out of memory)
    weights_gib: float = 16.0
    kv_cache_gib: float = 40.0
    acceptance: float = 0.8
    # Generation config of the "model" (as vLLM reads generation_config.json).
    gen_max_new_tokens: int | None = None
    # Before vLLM PR #34063 the generation config's max_new_tokens capped even an explicit
    # max_tokens; True reproduces that older behaviour.
    gen_caps_explicit: bool = False
    # A hard cap on output tokens under speculative decoding (the #47297 shape).
    spec_output_cap: int | None = None
    cap_probability: float = 1.0   # < 1: the cap hits only this share of requests (flaky)
    eos_after: int | None = None
    startup_delay_s: float = 0.0
    # how long a SIGTERM'd server takes to exit (real vLLM: seconds to shut its engine down)
    shutdown_delay_s: float = 0.0
    first_request_delay_s: float = 0.0
    crash_after_tokens: int | None = None
    # A numerics bug: greedy output differs from the correct text after this many tokens.
    diverge_after_tokens: int | None = None
    noise_cv: float = 0.0
    # this server start's own speed level: every step time x N(1, server_cv), drawn once at
    # start-up (a different process, memory layout, clocks, acceptance path on real GPUs)
    server_cv: float = 0.0
    # a slow drift of the whole server's speed (real vLLM on a shared host, docs/validation.md
    # (f): ±20-30% between blocks seconds apart): every step time x (1 + drift_amplitude x
    # sin(2 pi t / drift_period_s)), t the wall time since start-up, so requests that run at the
    # same time see the same speed and requests seconds apart do not
    drift_amplitude: float = 0.0
    drift_period_s: float = 20.0
    # first-use stalls of a cold server (real vLLM 0.25.1 with CUDA graphs, docs/validation.md
    # (g): the first times a new batch shape appears, e.g. a prefill landing while other
    # requests decode, the engine stops for 0.75-1.9 s): the first ``cold_stalls`` times a
    # request's prefill starts while another request is decoding, the whole server pauses
    # ``cold_stall_s`` seconds (every in-flight request's next chunk, the new request's first
    # token too); 0 (the default): never
    cold_stalls: int = 0
    cold_stall_s: float = 0.0
    seed: int | None = None
    # Real greedy MTP (vLLM 0.25.1, tests/fixtures/vllm-0.25.1-mtp/): whether a draft is
    # accepted depends on the tokens, so the same prompt at temperature 0 gives the same chunk
    # pattern on every request, and another prompt (another context) another pattern and
    # acceptance. True draws a greedy request's acceptances from a generator seeded by its
    # prompt (and ``seed``); False (the default, kept for the existing tests) draws them from
    # the server's one generator, so repeated requests differ.
    prompt_seeded_acceptance: bool = False
    # Real vLLM merges a request's outputs that are still waiting for the API server into one
    # delta, so a stream that falls behind gets chunks of more than K+1 tokens (0.25.1 MTP: a
    # 5-token last chunk at K=3, docs/validation.md (e)). True: when the next step is already due
    # before a step's chunk is written, the simulator holds the chunk and sends both together.
    merge_lagging_outputs: bool = False
    fingerprint_hash: str = "nohash"
    # the model loaded behind the served name (``/v1/models``' ``root``, as vLLM lists the
    # MODEL argument there); None: the served name itself
    root: str | None = None
    # answer a request for any model name, streaming this server's own name (a router or
    # proxy in front of another model does): vLLM itself answers 404 to another name
    answer_any_model: bool = False
    # vLLM's torch profiler (sim/profile_trace.py): the decode step's kernels (name, us per
    # launch, launches), the host gap between steps (None: derived from step_ms), and where
    # POST /stop_profile writes the trace (None: no profiler; the routes answer 404)
    kernels: tuple[tuple[str, float, int], ...] = ()
    host_gap_us: float | None = None
    profiler_dir: str | None = None
    profiler_gzip: bool = True
    # vLLM captures CUDA graphs unless --enforce-eager: a profiled decode step then launches
    # its captured kernels with one cudaGraphLaunch (the sampler's stay eager)
    cuda_graphs: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return f"vllm-{self.version}-{self.fingerprint_hash}"

    def default_overrides(self) -> dict[str, int]:
        """Sampling defaults taken from the generation config (vLLM logs these at start)."""
        return {"max_tokens": self.gen_max_new_tokens} if self.gen_max_new_tokens else {}


@dataclass(frozen=True)
class RequestPlan:
    """What one request will produce."""

    n_tokens: int
    finish_reason: str
    prompt_tokens: int


class RequestError(ValueError):
    """A request the real server would reject with 400."""


def count_prompt_tokens(prompt: str) -> int:
    return max(1, len(prompt.split()))


def plan_request(cfg: SimConfig, body: dict[str, Any], chat: bool, prompt_tokens: int,
                 rng: random.Random | None = None) -> RequestPlan:
    """Resolve max_tokens / min_tokens / ignore_eos the way vLLM 0.25.1 does."""
    room = cfg.max_model_len - prompt_tokens
    if room <= 0:
        raise RequestError(
            f"This model's maximum context length is {cfg.max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the input."
        )
    explicit = body.get("max_tokens")
    if chat and explicit is None:
        explicit = body.get("max_completion_tokens")
    if explicit is not None:
        if not isinstance(explicit, int) or isinstance(explicit, bool) or explicit < 1:
            raise RequestError(f"max_tokens must be at least 1, got {explicit}.")
        if explicit > room:
            raise RequestError(
                f"'max_tokens' is too large: {explicit}. This model's maximum context length is "
                f"{cfg.max_model_len} tokens and your request has {prompt_tokens} input tokens "
                f"({explicit} > {cfg.max_model_len} - {prompt_tokens})."
            )
        limit = explicit
        if cfg.gen_caps_explicit and cfg.gen_max_new_tokens:
            limit = min(limit, cfg.gen_max_new_tokens)
    elif not chat:
        # /v1/completions' own default (16) wins over the generation config (seen on 0.25.1).
        limit = 16
    else:
        limit = cfg.gen_max_new_tokens or room
    limit = min(limit, room)
    flake_ok = rng is None or cfg.cap_probability >= 1.0 or rng.random() < cfg.cap_probability
    if cfg.spec_k and cfg.spec_output_cap is not None and flake_ok:
        limit = min(limit, cfg.spec_output_cap)
    min_tokens = body.get("min_tokens") or 0
    if not isinstance(min_tokens, int) or min_tokens < 0:
        raise RequestError(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if explicit is not None and min_tokens > explicit:
        raise RequestError(
            f"min_tokens must be less than or equal to max_tokens={explicit}, got {min_tokens}."
        )
    n, reason = limit, "length"
    if cfg.eos_after is not None and not body.get("ignore_eos", False):
        natural = max(cfg.eos_after, min_tokens)
        if natural < limit:
            n, reason = natural, "stop"
    return RequestPlan(n_tokens=n, finish_reason=reason, prompt_tokens=prompt_tokens)


@dataclass(frozen=True)
class Step:
    """One engine step: how many tokens it emits and how many drafts it accepted."""

    tokens: int
    drafted: int
    accepted: int


def plan_steps(cfg: SimConfig, n_tokens: int, rng: random.Random) -> list[Step]:
    """Split n_tokens into engine steps. The first (prefill) step emits one token."""
    steps: list[Step] = []
    if n_tokens <= 0:
        return steps
    steps.append(Step(tokens=1, drafted=0, accepted=0))
    left = n_tokens - 1
    while left > 0:
        if cfg.spec_k:
            accepted = 0
            while accepted < cfg.spec_k and rng.random() < cfg.acceptance:
                accepted += 1
            emitted = min(accepted + 1, left)
            steps.append(Step(tokens=emitted, drafted=cfg.spec_k, accepted=accepted))
        else:
            emitted = 1
            steps.append(Step(tokens=1, drafted=0, accepted=0))
        left -= emitted
    return steps


def token_text(index: int, diverge_after: int | None = None) -> str:
    shift = 7 if diverge_after is not None and index >= diverge_after else 0
    return " " + VOCAB[(index + shift) % len(VOCAB)]
