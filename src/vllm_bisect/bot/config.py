"""The bot's configuration (TOML, validated like the bisect spec)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vllm_bisect.errors import SpecError


class BotConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = 8787
    webhook_secret_env: str = "VLLM_BISECT_WEBHOOK_SECRET"
    github_api_url: str = "https://api.github.com"   # GitHub Enterprise: https://HOST/api/v3
    token_env: str = "GITHUB_TOKEN"
    label: str = "bisect"                            # `issues` labeled with this start a bisect
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
    base_spec: dict[str, Any] = Field(default_factory=dict)  # merged under every job's spec

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
