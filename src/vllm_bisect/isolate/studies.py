"""The studies bound to a session directory: the spec and culprit of a finished bisect (or
given), the session's lock and journal, the study journal, the result files.

Each study's result goes into the session's ``result.json`` under its own key (``isolate``,
``deps``, ``knobs``; with the verdict strategy that judged) and the reports are written
again; a session without a finished bisect (``knobs`` on its own) gets ``knobs.json``. The
finished study's JSON is also kept in the studies' journal. Nothing here prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import git

from vllm_bisect.bisect.range import open_repo, resolve_ref
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.errors import FatalError, SpecError
from vllm_bisect.isolate.adapter import OnTrial, StudyBench
from vllm_bisect.isolate.culprit import Isolation
from vllm_bisect.isolate.deps import DependencyStudy
from vllm_bisect.isolate.knobs import Knob, apply, knob_table
from vllm_bisect.spec import BisectSpec, parse_spec
from vllm_bisect.spec import stored_spec as load_stored

OnPhase = Callable[[str, str], None]


def source_build(spec: BisectSpec) -> BisectSpec:
    """The spec with a build that can build an arbitrary tree: source and command builds as
    they are; wheel builds become precompiled source builds (the compiled parts of the nearest
    wheel, no compiler: a subset that touches compiled source is then a skip)."""
    b = spec.build
    if b.kind in ("source", "command"):
        return spec
    if b.kind == "wheel":  # (through the spec's own validation, whatever its build layout)
        data = spec.model_dump(mode="json")
        data["build"] = {"kind": "source", "precompiled": True, "full_build": False,
                         **{k: v for k, v in data["build"].items()
                            if k in ("index_url", "variant", "python")}}
        return parse_spec(data, source="isolate: the wheel build as a precompiled source build")
    raise SpecError(f"build.kind = {str(b.kind)!r} cannot build a subset of a commit",
                    hint='use build.kind = "source" (precompiled = true for Python-only '
                         'culprits) or "command"')


def stored_spec(session: Path) -> BisectSpec | None:
    from vllm_bisect.bisect.state.journal import SessionJournal

    if not (session / "journal.sqlite").exists():
        return None
    j = SessionJournal(session)
    try:
        text = j.get_meta("spec")
    finally:
        j.close()
    # (JSON as this version stores it, or an earlier version's TOML, migrated)
    return load_stored(text, source=f"{session}/journal.sqlite") if text else None


def _result_doc(session: Path) -> dict[str, Any] | None:
    p = session / "result.json"
    return dict(json.loads(p.read_text())) if p.exists() else None


def target(session: Path, spec: BisectSpec | None, culprit_ref: str | None
           ) -> tuple[BisectSpec, git.Repo, str, str]:
    """(spec, repo, culprit, parent): the session's bisect unless given."""
    spec = spec or stored_spec(session)
    if spec is None:
        raise FatalError(f"{session} holds no bisect spec", hint="pass --spec FILE")
    repo = open_repo(spec.range.repo)
    doc = _result_doc(session)
    ref = culprit_ref or (doc or {}).get("first_bad")
    if not ref:
        raise FatalError(f"{session} has no culprit to study (no finished bisect with a "
                         "single first bad commit)", hint="pass --culprit REF")
    c = resolve_ref(repo, str(ref), "culprit")
    if not c.parents:
        raise FatalError(f"{c.hexsha[:12]} has no parent to compare with")
    return spec, repo, c.hexsha, c.parents[0].hexsha


def _save(session: Path, bench: StudyBench, key: str, doc: dict[str, Any], judged: bool = True
          ) -> None:
    if judged:  # (a study that judged nothing, e.g. no pins changed, names no strategy)
        doc.update(bench.strategy())
    bench.journal.set_meta(f"result:{key}", json.dumps(doc))
    from vllm_bisect.report.render import write_section

    write_section(session, key, doc)   # validated as its section's model (report_section.py)


def run_studies(session: Path, cache_dir: Path, *, isolate: bool = True, deps: bool = True,
                hunks: bool = True, spec: BisectSpec | None = None,
                culprit: str | None = None, index_url: str | None = None,
                on_trial: OnTrial | None = None, on_phase: OnPhase | None = None
                ) -> dict[str, dict[str, Any]]:
    """Isolate the culprit's files and hunks and/or study its dependency pins."""
    spec0, repo, sha, parent = target(session, spec, culprit)
    spec_ = source_build(spec0)
    out: dict[str, dict[str, Any]] = {}
    with Session(session) as s:
        bench = StudyBench(repo, cache_dir, s, on_trial, on_phase)
        try:
            if isolate:
                out["isolate"] = Isolation(bench, spec_, repo, sha, parent).run(hunks).to_dict()
                _save(session, bench, "isolate", out["isolate"])
            if deps:
                d = DependencyStudy(bench, spec_, repo, sha, parent, index_url)
                out["deps"] = d.run().to_dict()
                _save(session, bench, "deps", out["deps"], judged=bool(out["deps"]["changes"]))
        finally:
            bench.close()
    return out


def default_commits(session: Path | None, spec: BisectSpec) -> list[str]:
    """Where to turn the knobs by default: a bisect session's culprit and its parent, else
    range.bad."""
    doc = _result_doc(session) if session is not None else None
    if doc and doc.get("first_bad"):
        c = resolve_ref(open_repo(spec.range.repo), str(doc["first_bad"]), "culprit")
        return [c.hexsha] + [p.hexsha for p in c.parents[:1]]
    return [spec.range.bad] if spec.range.bad else []


def knob_pair(session: Path | None, spec: BisectSpec) -> tuple[str, str]:
    """(good, bad) the verdict policy is settled on: a bisect session's culprit's parent and
    the culprit, else the spec's range."""
    doc = _result_doc(session) if session is not None else None
    repo = open_repo(spec.range.repo)
    if doc and doc.get("first_bad"):
        c = resolve_ref(repo, str(doc["first_bad"]), "culprit")
        if c.parents:
            return c.parents[0].hexsha, c.hexsha
    if not spec.range.good or not spec.range.bad:
        raise SpecError("knobs are judged by the bisect's verdict policy, settled on a good and "
                        "a bad commit: the spec names none",
                        hint="set range.good and range.bad, or pass a bisect session")
    return (resolve_ref(repo, spec.range.good, "good").hexsha,
            resolve_ref(repo, spec.range.bad, "bad").hexsha)


def run_knobs(session: Path, cache_dir: Path, spec: BisectSpec, commits: list[str],
              knobs: list[Knob], on_trial: OnTrial | None = None,
              on_phase: OnPhase | None = None) -> dict[str, Any]:
    repo = open_repo(spec.range.repo)
    shas = [resolve_ref(repo, c, "commit").hexsha for c in commits]
    good, bad = knob_pair(session, spec)
    with Session(session) as s:
        bench = StudyBench(repo, cache_dir, s, on_trial, on_phase)
        try:
            base = apply(spec, {k: k.values[0] for k in knobs})
            bench.settle(base, good, bad, len(shas) * (2 + sum(len(k.values) for k in knobs)),
                         require=False)
            tables = [knob_table(bench, spec, c, knobs).to_dict() for c in shas]
            doc = {"knobs": [{"name": k.name, "values": list(k.values), "kind": k.kind.value}
                             for k in knobs], "tables": tables,
                   "settled_on": {"good": good, "bad": bad},
                   "fresh_builds": bench.fresh}
            _save(session, bench, "knobs", doc)
        finally:
            bench.close()
    return doc
