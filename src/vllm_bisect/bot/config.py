"""The bot's configuration (TOML, validated like the bisect spec)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vllm_bisect.errors import SpecError

# serve flags a request (the issue body) may set: numbers and names, no paths, no network
SAFE_SERVE_FLAGS = (
    "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization",
    "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--dtype",
    "--kv-cache-dtype", "--quantization", "--block-size", "--seed", "--enforce-eager",
    "--enable-prefix-caching", "--no-enable-prefix-caching", "--enable-chunked-prefill",
    "--no-enable-chunked-prefill", "--async-scheduling", "--no-async-scheduling",
    "--enable-expert-parallel", "--generation-config", "--max-logprobs")
# `vllm bench` flags a request may set (the dataset is generated, never read from a path)
SAFE_BENCH_FLAGS = (
    "--dataset-name", "--num-prompts", "--random-input-len", "--random-output-len",
    "--random-range-ratio", "--input-len", "--output-len", "--max-concurrency", "--request-rate",
    "--burstiness", "--seed", "--async-engine", "--prefix-repetition-prefix-len",
    "--prefix-repetition-suffix-len", "--prefix-repetition-num-prefixes",
    "--prefix-repetition-output-len")
# environment variables a request may set (values: names and numbers only)
SAFE_ENV = (
    "VLLM_ATTENTION_BACKEND", "VLLM_USE_V1", "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_USE_DEEP_GEMM",
    "VLLM_FLASHINFER_MOE_BACKEND", "VLLM_USE_FLASHINFER_MOE_FP4", "VLLM_USE_FLASHINFER_MOE_FP8",
    "VLLM_MLA_DISABLE", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_USE_TRTLLM_ATTENTION",
    "VLLM_DISABLE_COMPILE_CACHE", "VLLM_USE_STANDALONE_COMPILE", "VLLM_ALL2ALL_BACKEND",
    "VLLM_MOE_DP_CHUNK_SIZE", "VLLM_USE_FUSED_MOE_GROUPED_TOPK", "VLLM_FUSED_MOE_CHUNK_SIZE")


class BotConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = 8787
    webhook_secret_env: str = "VLLM_BISECT_WEBHOOK_SECRET"
    github_api_url: str = "https://api.github.com"   # GitHub Enterprise: https://HOST/api/v3
    token_env: str = "GITHUB_TOKEN"
    label: str = "bisect"                            # `issues` labeled with this start a bisect
    # a range read from the issue (a label, a bare /bisect) is shown and waits for
    # `/bisect go`; False: it is queued at once, unconfirmed
    confirm_triaged_range: bool = True
    allowlist: list[str] = Field(default_factory=list)
    trusted_associations: list[str] = Field(
        default_factory=lambda: ["OWNER", "MEMBER", "COLLABORATOR"])
    max_body_bytes: int = Field(default=1 << 20, gt=0)
    max_queue: int = Field(default=20, gt=0)
    jobs_per_user_per_hour: int = Field(default=3, gt=0)
    jobs_per_repo_per_hour: int = Field(default=10, gt=0)
    workers: int = Field(default=1, ge=0)            # 0: accept and queue only
    state_dir: Path = Path("vllm-bisect-bot")
    cache_dir: Path | None = None
    progress_interval_s: float = 10.0
    base_spec: dict[str, Any] = Field(default_factory=dict)  # every job's spec starts here
    # What a request may add to base_spec (anything else is refused and named in the reply;
    # base_spec's own args, env and speculative config are never overridden by a request).
    allowed_serve_flags: list[str] = Field(default_factory=lambda: list(SAFE_SERVE_FLAGS))
    allowed_env: list[str] = Field(default_factory=lambda: list(SAFE_ENV))
    allowed_models: list[str] = Field(default_factory=list)   # fnmatch patterns; [] = base's
    allowed_bench_flags: list[str] = Field(default_factory=lambda: list(SAFE_BENCH_FLAGS))
    allowed_speculative_keys: list[str] = Field(
        default_factory=lambda: ["method", "num_speculative_tokens"])
    max_probe_tokens: int = Field(default=16384, gt=0)
    # `issues` labeled events: the labeler's role from the collaborators API
    trusted_permissions: list[str] = Field(
        default_factory=lambda: ["admin", "maintain", "write"])
    # the webhook server: acknowledge within ack_wait_s, handle in handler_threads threads
    github_timeout_s: float = Field(default=10.0, gt=0)
    ack_wait_s: float = Field(default=2.0, ge=0)
    handler_threads: int = Field(default=4, gt=0, le=64)
    max_pending: int = Field(default=64, gt=0)
    replay_window_s: float = Field(default=7 * 86400.0, gt=0)   # body-hash dedupe
    rate_reply_window_s: float = Field(default=3600.0, gt=0)    # one rate-limit reply per
    body_timeout_s: float = Field(default=10.0, gt=0)           # whole body within this
    header_timeout_s: float = Field(default=10.0, gt=0)         # a request's headers within
    keep_alive_s: float = Field(default=5.0, gt=0)
    max_connections: int = Field(default=64, gt=0)              # open at once (admission.py)
    max_connections_per_client: int = Field(default=16, gt=0)   # from one address
    max_header_bytes: int = Field(default=16384, ge=1024)       # h11 max incomplete event
    triage_max_chars: int = Field(default=32768, gt=0)
    triage_timeout_s: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _no_bot_secrets_to_children(self) -> BotConfig:
        passed = (self.base_spec.get("serve") or {}).get("pass_env") or []
        leaked = {self.token_env, self.webhook_secret_env} & set(passed)
        if leaked:
            raise ValueError(f"base_spec.serve.pass_env must not pass the bot's own "
                             f"credentials ({', '.join(sorted(leaked))})")
        return self

    def secret(self) -> bytes:
        value = os.environ.get(self.webhook_secret_env)
        if not value:
            raise SpecError(f"the webhook secret is not set (environment variable "
                            f"{self.webhook_secret_env})", hint="export it; GitHub signs "
                            "every delivery with it")
        return value.encode()

    def token(self) -> str | None:
        return os.environ.get(self.token_env)


def load_config(path: Path) -> BotConfig:
    try:
        data = tomllib.loads(path.read_text())
        return BotConfig.model_validate(data)
    except FileNotFoundError:
        raise SpecError(f"bot config not found: {path}") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"bot config {path} is not valid TOML: {err}") from None
    except ValidationError as err:
        keys = ", ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in err.errors())
        raise SpecError(f"invalid bot config {path}: {keys}") from None
