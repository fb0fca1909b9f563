"""The documents the studies write into result.json, one model per section (see
``report.section``). Field order is the order the studies write them in."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from vllm_bisect.report.section import SectionDoc


class IsolateDoc(SectionDoc):
    """``isolate``: ddmin over the culprit's files and hunks (isolate/culprit.py)."""

    culprit: str | None = None
    parent: str
    files: list[str]
    python_only: bool | None = None
    minimal_files: list[str] = Field(default_factory=list)
    file_tests: int
    hunks: list[str] = Field(default_factory=list)
    minimal_hunks: list[str] = Field(default_factory=list)
    hunk_tests: int = 0
    tests: int | None = None
    revert_verdict: str | None = None
    revert_reason: str | None = None
    revert_removes: bool | None = None
    fresh_builds: int
    trials: list[dict[str, Any]] = Field(default_factory=list)
    # the verdict strategy that judged (isolate/adapter.py, StudyBench.strategy()), written last
    strategy: str | None = None
    strategy_reason: str | None = None


class DepsDoc(SectionDoc):
    """``deps``: the culprit's dependency pins and versions (isolate/deps.py)."""

    culprit: str | None = None
    parent: str | None = None
    changes: list[str] = Field(default_factory=list)
    base_changes: list[str] = Field(default_factory=list)
    base_note: str = ""
    parent_with_new_pins: str | None = None
    culprit_with_old_pins: str | None = None
    conclusion: str | None = None
    index_url: str | None = None
    fresh_builds: int | None = None
    packages: list[dict[str, Any]] = Field(default_factory=list)
    # the verdict strategy that judged (isolate/adapter.py, StudyBench.strategy()), written last
    strategy: str | None = None
    strategy_reason: str | None = None


class KnobsDoc(SectionDoc):
    """``knobs``: which config knob flips the symptom (isolate/knobs.py)."""

    knobs: list[dict[str, Any]] = Field(default_factory=list)
    tables: list[dict[str, Any]] = Field(default_factory=list)
    settled_on: dict[str, str] | None = None
    fresh_builds: int | None = None
    # the verdict strategy that judged (isolate/adapter.py, StudyBench.strategy()), written last
    strategy: str | None = None
    strategy_reason: str | None = None


class ExplainDoc(SectionDoc):
    """``explain``: the culprit's profile against its parent's (explain/run.py)."""

    culprit: str | None = None
    parent: str | None = None
    servers_per_side: int
    setups: dict[str, dict[str, Any]] | None = None
    server_starts: int | None = None
    servers_kept: int | None = None
    profiler: dict[str, str]
    segmentation: str
    steps: dict[str, list[Any]] | None = None
    tokens_per_step: dict[str, list[Any]] | None = None
    traces: dict[str, list[str]]
    totals: list[dict[str, Any]]
    deltas: list[dict[str, Any]]
    within_spread: int
    plot: str
    environment: dict[str, Any]
