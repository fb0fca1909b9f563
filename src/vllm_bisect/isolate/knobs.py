"""Config bisect: which knob flips the symptom at a commit.

A knob is an environment variable (``VLLM_X=a,b``) or a ``vllm serve`` flag
(``--attention-backend=FLASH_ATTN,TRITON_ATTN``) with a list of values; the first value is
the baseline. ``-`` means unset (the variable or the flag absent) and, for a flag, ``+`` means
present without a value (``--enforce-eager=-,+``). The study judges the baseline, then every
other value of every knob one at a time (a table knob -> value -> verdict), then, when every
knob at its last value flips the baseline's verdict, ddmin over the knobs for the smallest
combination that flips it. Verdicts come from the bisect's verdict policy, settled on a good
and a bad commit at the baseline setting (:class:`~vllm_bisect.isolate.adapter.StudyBench`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from vllm_bisect.errors import SpecError
from vllm_bisect.isolate.adapter import StudyBench, StudyTrial
from vllm_bisect.isolate.ddmin import Result, Subset, minimize
from vllm_bisect.models import Verdict
from vllm_bisect.spec import BisectSpec

STUDY = "knobs"
UNSET, PRESENT = "-", "+"


class KnobKind(StrEnum):
    ENV = "env"
    ARG = "arg"


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[str, ...]
    kind: KnobKind

    def setting(self, value: str) -> str:
        if value == UNSET:
            return f"{self.name} unset" if self.kind is KnobKind.ENV else f"no {self.name}"
        if self.kind is KnobKind.ARG and value == PRESENT:
            return self.name
        return f"{self.name}={value}"


def parse_knob(text: str) -> Knob:
    """``NAME=a,b`` (env) or ``--flag=a,b`` (serve flag)."""
    name, sep, values = text.partition("=")
    vals = tuple(v.strip() for v in values.split(",")) if sep else ()
    kind = KnobKind.ARG if name.startswith("-") else KnobKind.ENV
    ok_name = name.lstrip("-").replace("-", "_").replace(".", "_").isidentifier()
    if not sep or len(vals) < 2 or any(v == "" for v in vals) or not ok_name:
        raise SpecError(f"invalid knob {text!r}",
                        hint="use NAME=BASELINE,OTHER[,...] for an env var or "
                             "--flag=BASELINE,OTHER for a serve flag; '-' means unset, "
                             "'+' a flag without a value")
    return Knob(name, vals, kind)


def _strip_flag(args: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == flag:
            nxt = args[i + 1] if i + 1 < len(args) else None
            skip = nxt is not None and not nxt.startswith("--")
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return out


def apply(spec: BisectSpec, setting: dict[Knob, str]) -> BisectSpec:
    """``spec`` served with each knob at its value (the command builder's serve line gets the
    flags too: it does not read serve.args)."""
    env = dict(spec.serve.env)
    args = list(spec.serve.args)
    added: list[str] = []
    for knob, value in setting.items():
        if knob.kind is KnobKind.ENV:
            if value == UNSET:
                env.pop(knob.name, None)
            else:
                env[knob.name] = value
            continue
        args = _strip_flag(args, knob.name)
        if value == PRESENT:
            added.append(knob.name)
        elif value != UNSET:
            added.append(f"{knob.name}={value}")
    serve = spec.serve.model_copy(update={"env": env, "args": args + added})
    build = spec.build
    if build.kind == "command" and added and getattr(build, "serve", None):
        line = " ".join(shlex.quote(a).replace("{", "{{").replace("}", "}}") for a in added)
        build = build.model_copy(update={"serve": f"{getattr(build, 'serve', '')} {line}"})
    return spec.model_copy(update={"serve": serve, "build": build})


@dataclass
class KnobRow:
    knob: str
    value: str
    verdict: str
    reason: str
    flips: bool | None   # None: could not be tested

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class KnobTable:
    commit: str
    baseline: str = ""
    baseline_verdict: str = ""
    baseline_reason: str = ""
    rows: list[KnobRow] = field(default_factory=list)
    all_changed_verdict: str | None = None
    minimal: list[str] = field(default_factory=list)   # the smallest flipping combination
    combo_tests: int = 0

    @property
    def flipping(self) -> list[str]:
        return [f"{r.knob}={r.value}" for r in self.rows if r.flips]

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "rows"}
        d["rows"] = [r.to_dict() for r in self.rows]
        d["flipping"] = self.flipping
        return d


def knob_table(bench: StudyBench, spec: BisectSpec, commit: str, knobs: list[Knob]) -> KnobTable:
    """The knob table at ``commit``, judged by the bench's settled policy."""
    base_setting = {k: k.values[0] for k in knobs}

    def run(setting: dict[Knob, str]) -> StudyTrial:
        label = ", ".join(k.setting(v) for k, v in setting.items())
        return bench.trial(apply(spec, setting), commit, study=STUDY,
                           label=f"{commit[:12]}: {label}")

    base = run(base_setting)
    table = KnobTable(commit, ", ".join(k.setting(v) for k, v in base_setting.items()),
                      base.verdict.value, base.reason)
    if base.verdict is Verdict.SKIP:
        return table

    def flips(t: StudyTrial) -> bool | None:
        return None if t.verdict is Verdict.SKIP else t.verdict is not base.verdict

    for k in knobs:
        for v in k.values[1:]:
            t = run({**base_setting, k: v})
            table.rows.append(KnobRow(k.name, v, t.verdict.value, t.reason, flips(t)))
    if len(knobs) < 2:
        table.minimal = table.flipping[:1]
        return table
    last = {k: k.values[-1] for k in knobs}
    everything = run(last)
    table.all_changed_verdict = everything.verdict.value
    if not flips(everything):
        return table

    def test(s: Subset) -> Result:
        t = run({**base_setting, **{knobs[i]: knobs[i].values[-1] for i in s}})
        f = flips(t)
        return Result.UNRESOLVED if f is None else Result.FAIL if f else Result.PASS

    found = minimize(len(knobs), test)
    table.combo_tests = found.tests
    table.minimal = [knobs[i].setting(knobs[i].values[-1]) for i in found.minimal]
    return table
