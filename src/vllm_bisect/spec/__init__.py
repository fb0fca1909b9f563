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
from vllm_bisect.spec.build import (
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
    served_name,
)
from vllm_bisect.spec.keys import did_you_mean
from vllm_bisect.spec.load import BenchSpec, LoadSpec, dump_spec
from vllm_bisect.spec.ops import SIZE_PATTERN, ExecutorKind, ExplainSpec, OpsSpec, ParallelSpec
from vllm_bisect.spec.verdict import (
    JUDGES,
    MAX_OUTPUT_TOKENS,
    NO_FIX_SEARCH,
    PER_REQUEST,
    Strategy,
    Symptom,
    VerdictSpec,
    output_token_floor,
    runs_with,
    symptoms_text,
    tokens_conflict,
)

__all__ = [
    "DEFAULT_TAGS",
    "SIZE_PATTERN",
    "ArtifactKind",
    "BenchSpec",
    "BisectSpec",
    "BuildSpec",
    "CommandBuild",
    "Endpoint",
    "ExecutorKind",
    "ExplainSpec",
    "ImageBuild",
    "LoadSpec",
    "OpsSpec",
    "ParallelSpec",
    "ProbeSpec",
    "RangeSpec",
    "SearchKind",
    "ServeSpec",
    "SourceBuild",
    "SpeculativeSpec",
    "Strategy",
    "Symptom",
    "UrlBuild",
    "VerdictSpec",
    "WheelBuild",
    "dump_spec",
    "load_spec",
    "output_token_floor",
    "parse_spec",
    "stored_spec",
]

# the measurement key's schema: bump it when what a key covers changes (old cache entries
# are then never matched again). 2: [ops] left the key; build is one model per kind.
KEY_VERSION = 2


class Endpoint(StrEnum):
    COMPLETIONS = "completions"
    CHAT = "chat"


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

    def request_name(self) -> str:
        """The model name the probe asks for (:func:`~vllm_bisect.spec.build.served_name`)."""
        return served_name(self.args, self.model)

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
    max_tokens: int | None = Field(default=512, ge=1, le=MAX_OUTPUT_TOKENS)
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

    def sent_max_tokens(self) -> int | None:
        return self.max_tokens if self.send_max_tokens else None

    def effective_min_tokens(self) -> int | None:
        return output_token_floor(self.min_tokens, self.max_tokens, self.send_max_tokens)


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

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """Defaults that follow from other keys, set in the input before validation (a new
        value, never a validated model changed in place): ``verdict.symptom`` is the first of
        ``verdict.symptoms`` (issue 28), and an itl / ttft spec judged two-level (written)
        starts with one request (the test asks for more when they help) unless
        ``probe.requests`` is given."""
        if not isinstance(data, dict):
            return data
        verdict, probe = data.get("verdict"), data.get("probe")
        symptoms = _key(verdict, "symptoms", [])
        first = symptoms[0] if isinstance(symptoms, list) and symptoms else None
        if isinstance(first, str) and first in set(Symptom):
            verdict = _with_key(verdict, "symptom", first)
            data = {**data, "verdict": verdict}
        judged = [_key(verdict, "symptom", Symptom.ANY),
                  *(symptoms if isinstance(symptoms, list) else [])]
        given = (probe.model_fields_set if isinstance(probe, BaseModel)
                 else probe if isinstance(probe, dict) else {})
        written = _key(verdict, "strategy", Strategy.AUTO)
        if (isinstance(written, str) and written in set(Strategy) and "requests" not in given
                and any(isinstance(s, str) and s in PER_REQUEST
                        and runs_with(written, Symptom(s)) is Strategy.TWOLEVEL
                        for s in judged)):
            data = {**data, "probe": _with_key(probe, "requests", 1)}
        return data

    @model_validator(mode="after")
    def _check_verdict(self) -> BisectSpec:
        v = self.verdict
        # issue 28: each symptom checked alone (`symptom` is the first: _derived_defaults)
        for s in v.symptoms[1:]:
            _ = self.for_symptom(s)._check_verdict()  # type: ignore[operator]
        if self.range.search is SearchKind.FIX and v.strategy in NO_FIX_SEARCH:
            raise ValueError('range.search = "fix" works with the threshold and sequential '
                             f'strategies, not "{v.strategy.value}"')
        judges = JUDGES.get(v.strategy)
        if judges is not None and v.symptom not in judges:
            raise ValueError(f'verdict.strategy = "{v.strategy.value}" needs verdict.symptom = '
                             + symptoms_text(judges))
        if why := _unmet(self, v.symptom, v.strategy):
            raise ValueError(why)
        p = self.probe
        if why := tokens_conflict(v.min_output_tokens, p.max_tokens, p.send_max_tokens):
            raise ValueError(why)
        return self

    def symptom_list(self) -> list[Symptom]:
        """``verdict.symptoms``, else ``[verdict.symptom]``."""
        return list(self.verdict.symptoms) or [self.verdict.symptom]

    def for_symptom(self, symptom: Symptom) -> BisectSpec:
        """This spec judging one symptom (the probe, hence the measurement key, unchanged)."""
        v = self.verdict.model_copy(update={"symptom": symptom, "symptoms": []})
        return self.model_copy(update={"verdict": v})

    def min_output_tokens(self) -> int | None:
        return output_token_floor(self.verdict.min_output_tokens, self.probe.max_tokens,
                                  self.probe.send_max_tokens)

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


def _key(section: Any, key: str, default: Any) -> Any:
    """A key of a table as given: a dict from TOML / JSON, or a model."""
    if isinstance(section, BaseModel):
        return getattr(section, key, default)
    return section.get(key, default) if isinstance(section, dict) else default


def _with_key(section: Any, key: str, value: Any) -> Any:
    """A copy of a table (dict or model; None: only the key) with ``key`` set."""
    if isinstance(section, BaseModel):
        return section.model_copy(update={key: value})
    return {**(section if isinstance(section, dict) else {}), key: value}


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


MAX_SPEC_BYTES = 4 << 20   # a spec is a few KiB; /dev/zero or a core file is not one
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
         (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def _spec_text(path: Path, raw: bytes) -> str:
    """``raw`` as UTF-8 text (a UTF-8 byte-order mark is dropped, as TOML allows); a file in
    another encoding or not text at all is a :class:`SpecError` that says which."""
    saved_as = next((name for bom, name in _BOMS if raw.startswith(bom)), None)
    if saved_as:
        raise SpecError(f"spec file {path} is {saved_as} text (it starts with a {saved_as} "
                        "byte-order mark); TOML is UTF-8",
                        hint="save it as UTF-8 (most editors: 'Save with encoding')")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise SpecError(f"spec file {path} is not UTF-8 text (byte 0x{raw[err.start]:02x} at "
                        f"offset {err.start})",
                        hint="pass the TOML spec file, saved as UTF-8") from None


def load_spec(path: Path) -> BisectSpec:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {path}", hint="pass an existing TOML file to --spec") from None
    except OSError as err:
        raise SpecError(f"cannot read spec file {path}: {err.strerror}",
                        hint="pass a readable TOML file to --spec") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"spec file {path} is larger than {MAX_SPEC_BYTES >> 20} MiB: not a "
                        "spec", hint="pass the TOML spec file to --spec")
    text = _spec_text(path, raw)
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


def _unmet(spec: BisectSpec, symptom: Symptom, strategy: Strategy) -> str | None:
    """What the spec lacks that ``symptom`` needs (its declaration's ``needs``), as one line."""
    unmet = [n for n in symptom.info.needs
             if not (n.threshold_only and strategy is not Strategy.THRESHOLD) and not n.met(spec)]
    if not unmet:
        return None
    said = [n.says() for n in symptom.info.needs]
    joined = said[0] if len(said) == 1 else (
        ", ".join(said[:-1]) + (", and " if any(" or " in x for x in said) else " and ")
        + said[-1])
    return f'verdict.symptom = "{symptom.value}" needs {joined}'
