"""What triage hands on: each value it read (with where from and how sure), and the reading."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from vllm_bisect.triage.roles import SearchKind


class Source(StrEnum):
    """How a value was got: READ from a field of the regression form (the reporter's own
    answer, taken as written), or GUESSED from free text by the rules."""

    READ = "read"
    GUESSED = "guessed"


@dataclass(frozen=True)
class Read:
    """One thing read from the report: what, its value, the line, why, how sure (``source``)
    and the sentence of that line it came from (``quote``)."""

    what: str
    value: str
    line: int | None
    why: str
    source: Source = Source.GUESSED
    quote: str = ""


@dataclass
class Triage:
    search: SearchKind = SearchKind.REGRESSION
    good: str | None = None     # the range's old end: good (regression) / has the problem (fix)
    bad: str | None = None      # the range's new end: bad (regression) / fixed (fix)
    good_label: str | None = None
    bad_label: str | None = None
    candidates: dict[str, list[str]] = field(default_factory=dict)  # role -> refs, oldest first
    points: list[dict[str, Any]] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    symptoms: list[str] = field(default_factory=list)
    symptom: str | None = None  # the one the spec follows
    cap_tokens: int | None = None   # the output-token count generations stop at, as written
    itl_factor: float | None = None
    throughput_factor: float | None = None
    numbers: dict[str, list[float]] = field(default_factory=dict)
    model: str | None = None
    local_model: str | None = None
    speculative: dict[str, Any] | None = None
    speculative_method_said: str | None = None  # the method as written (before -> 'mtp')
    serve_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    env_flips: dict[str, list[str]] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    benchmark: str | None = None
    bench: dict[str, Any] | None = None
    fixed_by: list[str] = field(default_factory=list)  # PR numbers; a sha for a fix commit URL
    read: list[Read] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)
    form: bool = False          # the body was the regression form (its fields read exactly)
    details: str = ""           # the form's "What you saw", as written

    @property
    def old_term(self) -> str:
        return "good" if self.search is SearchKind.REGRESSION else "has the problem"

    @property
    def new_term(self) -> str:
        return "bad" if self.search is SearchKind.REGRESSION else "fixed"
