"""The probe's load grids: ``[probe.load]`` / ``[probe.mtp_speedup]`` (a closed-loop load over
concurrency x context cells) and ``[probe.bench]`` (vLLM's own benchmark)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from vllm_bisect.spec.build import _Model


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


def dump_spec(spec: BaseModel) -> str:
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
