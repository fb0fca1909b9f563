"""From change points to bisect specs: one spec per reported window, built from a base spec
(the build, the served model, the repository) and the series' own benchmark settings."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import git

from vllm_bisect.errors import BisectError, RangeError
from vllm_bisect.symptoms import Symptom
from vllm_bisect.watch.detect import ChangePoint, DetectOptions, Direction, detect
from vllm_bisect.watch.series import Point, Series, grouped, higher_is_better, sha_in

if TYPE_CHECKING:
    from vllm_bisect.spec import BisectSpec


@dataclass(frozen=True)
class Finding:
    """A change point of one metric, with the commits that bound its window."""

    metric: str
    cp: ChangePoint
    direction: Direction
    before: Point              # the last point before the window (the old level)
    after: Point               # the first point after the window (the new level)
    points: int                # points of the series inside the window

    @property
    def name(self) -> str:
        return f"{self.metric}-{self.cp.index}"


def find(series: Series, metrics: list[str] | None = None,
         opts: DetectOptions | None = None) -> list[Finding]:
    """Every change point of every metric (reported or not), in series order per metric."""
    out = []
    for metric in metrics or series.metrics():
        pts, values = series.column(metric)
        for cp in detect(values, opts):
            out.append(Finding(metric=metric, cp=cp,
                               direction=cp.direction(higher_is_better(metric)),
                               before=pts[cp.lo - 1], after=pts[cp.hi],
                               points=cp.hi - cp.lo))
    return out


def resolve_ref(repo: git.Repo, ref: str) -> str:
    """A point's ref (sha, tag, version, ``+g<sha>`` version, ``nightly-<sha>``) as a full sha."""
    from vllm_bisect.bisect.range import resolve_ref as commit_of

    for candidate in (ref, sha_in(ref)):
        if not candidate:
            continue
        try:
            return commit_of(repo, candidate, "series").hexsha
        except RangeError:
            continue
    raise RangeError(f"the series' point {ref!r} names no commit of {repo.working_dir}",
                     hint="record the commit with each result (vllm bench serve --metadata "
                          "commit=<sha>) or pass --repo with a checkout that has it")


def resolve_points(series: Series, repo: git.Repo) -> Series:
    """The series with each point's full sha, in history order (stable: the series' own
    order among the measurements of one commit, and where history cannot tell)."""
    pts = tuple(p if p.commit else replace(p, commit=resolve_ref(repo, p.ref))
                for p in series.points)
    rank = history_rank(repo, [p.commit for p in pts if p.commit])
    if rank:
        pts = tuple(p for _, p in sorted(enumerate(pts), key=lambda ip: (
            rank.get(ip[1].commit or "", -1), ip[0])))
    return replace(series, points=grouped(pts))


def history_rank(repo: git.Repo, shas: list[str]) -> dict[str, int]:
    """Each commit's position in a topological order of the history they span (ancestors
    first); {} where they share no ancestor or git cannot say."""
    import git as gitlib

    uniq = list(dict.fromkeys(shas))
    if len(uniq) < 2:
        return {}
    try:
        base = repo.git.merge_base("--octopus", *uniq).split()[0]
        order = repo.git.rev_list("--topo-order", "--reverse", *uniq, f"^{base}").split()
    except (gitlib.GitCommandError, IndexError):
        return {}
    pos = {sha: i for i, sha in enumerate([base, *order])}
    return {s: pos[s] for s in uniq if s in pos}


def window_commits(repo: git.Repo, f: Finding) -> int | None:
    """First-parent commits in the window (last before, first after]: what a bisect of it
    searches (None: an end is not a commit of ``repo``)."""
    a, b = f.before.commit, f.after.commit
    if not a or not b:
        return None
    try:
        return int(repo.git.rev_list("--count", "--first-parent", f"{a}..{b}"))
    except (git.GitCommandError, ValueError):   # an end git does not know: count unknown
        return None


def _symptom(metric: str) -> Symptom | None:
    """The symptom a watched metric measures: the first whose declared words its name holds."""
    m = metric.lower()
    return next((s for s in Symptom if any(w in m for w in s.info.metric_words)), None)


def _bench_args(settings: dict[str, Any]) -> list[str]:
    args = []
    for key, flag in (("num_prompts", "--num-prompts"), ("max_concurrency", "--max-concurrency"),
                      ("request_rate", "--request-rate")):
        if settings.get(key) is not None:
            args += [flag, str(settings[key])]
    return args


def window_spec(base: BisectSpec, series: Series, f: Finding) -> BisectSpec:
    """The bisect spec for one finding's window: the base spec's build, serve and ops; the
    window as the range (a find-the-fix search for an improvement); the symptom the metric
    measures, with the factor that matters set halfway (geometrically) into the step."""
    from vllm_bisect.spec import parse_spec

    if f.before.key == f.after.key:
        raise BisectError(f"the step lies between two measurements of one commit "
                          f"({f.before.key[:12]}): no commit made it (noise, or the machine or "
                          "the setup changed between the runs)",
                          hint="measure that commit again, next to its neighbours")
    symptom = _symptom(f.metric)
    if symptom is None:
        raise BisectError(f"no bisect symptom measures {f.metric!r}",
                          hint="bisect this window by hand with a probe that measures it")
    factor = round(max(1.01, math.sqrt(max(f.cp.ratio, 1.0 / f.cp.ratio))), 4)
    data = base.model_dump(mode="json")
    data["range"].update(good=f.before.commit or f.before.ref, bad=f.after.commit or f.after.ref,
                         search="fix" if f.direction is Direction.IMPROVEMENT else "regression")
    verdict: dict[str, Any] = {"symptom": symptom.value}
    if symptom.info.factor_key:   # the smallest change that matters: half the step
        verdict[symptom.info.factor_key] = factor
    if (symptom is Symptom.THROUGHPUT and series.source == "bench-serve"
            and data["probe"].get("bench") is None):
        data["probe"]["bench"] = {"kind": "serve", "args": _bench_args(series.settings)}
    factors = {s.info.factor_key for s in Symptom}
    data["verdict"] = {**{k: v for k, v in data["verdict"].items()
                          if k != "symptom" and k not in factors}, **verdict}
    return parse_spec(data, source=f"watch window {f.name}")
