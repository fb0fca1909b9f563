"""One bisect session: the session directory, its parts opened by
:func:`~vllm_bisect.bisect.wiring.open_session` (builder, bench, result cache), one driver per
symptom.

What a finished session leaves besides its journal (result.json, the reports) is the caller's
``finish``: :func:`vllm_bisect.run_bisect.run_bisect` (``vllm-bisect run``, ``demo``, ``watch``,
the bot's worker) writes them. It prints nothing.
"""

from __future__ import annotations

import sqlite3
from collections import ChainMap, Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from vllm_bisect.bisect.culprits import MultiResult
from vllm_bisect.bisect.driver import BisectResult, Driver, EventHandler
from vllm_bisect.bisect.endpoint_env import EndpointEnvEvents
from vllm_bisect.bisect.multi import run_symptoms
from vllm_bisect.bisect.policies import Plan
from vllm_bisect.bisect.range import CommitRange, open_repo
from vllm_bisect.bisect.search.endpoints import untestable_end
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.bisect.state.pin import PIN_KEY, session_range
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.bisect.wiring import open_session
from vllm_bisect.builders.base import Builder, known_unavailable
from vllm_bisect.errors import SessionError, disk_full, storage_fault
from vllm_bisect.models import Evaluation, Outcome, Phase
from vllm_bisect.runtime.base import Artifact, artifact_of_json
from vllm_bisect.runtime.gpustate import locked_clocks
from vllm_bisect.spec import BisectSpec, dump_spec

# what a finished session writes (session dir, every symptom's result), under the session's lock
Finish = Callable[[Path, MultiResult], None]


def run_session(spec: BisectSpec, session_dir: Path, cache_dir: Path, events: EventHandler,
                finish: Finish) -> BisectResult:
    """One bisect, then ``finish``; a full disk or a damaged database anywhere (``finish``
    included) is the project's error."""
    try:
        return _run_session(spec, session_dir, cache_dir, events, finish)
    except (OSError, sqlite3.DatabaseError) as err:
        fault = (disk_full(err) or storage_fault(err, session_dir)
                 or storage_fault(err, cache_dir))
        if fault is not None:
            raise fault from None
        if isinstance(err, sqlite3.DatabaseError):
            raise SessionError(
                f"a database of this run is damaged: {err}",
                hint=f"the session journal ({session_dir / 'journal.sqlite'}) or the artifact "
                     f"index ({cache_dir / 'artifacts.sqlite'}): move the damaged file away "
                     "and start a new session; measured results stay in the cache dir") from None
        if err.filename is None:
            raise
        raise SessionError(f"cannot use {err.filename}: {err.strerror}",
                           hint="check the permissions of the session and cache dirs") from None


def whole_session(result: BisectResult, journal: SessionJournal) -> BisectResult:
    """Every call that worked on the session (a resumed one forgets nothing), from the
    journal: the commits judged (the earlier calls' first), server starts per phase and the
    time worked."""
    journal.touch_run()
    phases = journal.starts_by_phase()
    verify = phases.get(Phase.VERIFY.value, 0)
    probed, evaluations = whole_probed(result, journal)
    return replace(result, probed=probed, evaluations=evaluations, starts_by_phase=phases,
                   server_starts=sum(phases.values()) - verify, verify_server_starts=verify,
                   wall_s=journal.wall_s(), calls=journal.runs())


def whole_probed(result: BisectResult, journal: SessionJournal
                 ) -> tuple[list[Outcome], dict[str, Evaluation]]:
    """The earlier calls' judgements, then this call's, less what this call only replayed
    from them (a journaled verdict reused, ``from_cache``): the list an uninterrupted session
    would have judged; with each commit's evaluation (this call's where it has one)."""
    earlier = journal.earlier_outcomes()
    unmatched = Counter(o.commit for o, _ in earlier)
    mine = []
    for o in result.probed:
        if o.from_cache and unmatched[o.commit] > 0:
            unmatched[o.commit] -= 1   # a replay of an earlier call's verdict
            continue
        mine.append(o)
    evaluations = {ev.commit: ev for _, ev in earlier}
    evaluations.update(result.evaluations)
    return [o for o, _ in earlier] + mine, evaluations


def prepared_artifacts(journal: SessionJournal) -> dict[str, Artifact]:
    """The artifacts the earlier calls of the session prepared (a resume reads the endpoints'
    packages from them without preparing them again)."""
    out = {}
    for commit, text in journal.prepared_artifacts().items():
        artifact = artifact_of_json(text)
        if artifact is not None:
            out[commit] = artifact
    return out


def refuse_unbuildable_ends(builder: Builder, rng: CommitRange) -> None:
    """Before anything is built: an endpoint the builder already knows it cannot build (a
    compiled change under a precompiled build) ends the run with the builder's reason."""
    for end, name in ((rng.good, "good"), (rng.bad, "bad")):
        err = known_unavailable(builder, end.sha)
        if err is not None:
            raise untestable_end(name, end.sha, err.message, advice=err.hint)


def _run_session(spec: BisectSpec, session_dir: Path, cache_dir: Path, events: EventHandler,
                 finish: Finish) -> BisectResult:
    repo = open_repo(spec.range.repo)
    rng, pin = session_range(repo, spec.range, session_dir)  # pinned when it started
    with Session(session_dir, spec) as session:
        assert session.journal is not None
        if session.journal.get_meta(PIN_KEY) is None:
            session.journal.set_meta(PIN_KEY, pin.to_json())
        session.journal.set_meta("spec", spec.model_dump_json())  # exact (None kept)
        session.journal.set_meta("cache_dir", str(cache_dir.absolute()))
        session.journal.begin_run()
        (session_dir / "spec.toml").write_text(dump_spec(spec))
        with open_session(spec, cache_dir, session=session, repo=repo, events=events,
                          prefetch=True, check=lambda b: refuse_unbuildable_ends(b, rng)) as s:
            bench, cache = s.bench, s.cache
            # the endpoints' environment diff, told before the first search step (issue 28)
            events = env_events = EndpointEnvEvents(
                events, ChainMap(bench.evaluator.artifacts, prepared_artifacts(session.journal)),
                session_dir)

            def driver(sp: BisectSpec, r: CommitRange, plan: Plan) -> Driver:
                assert session.journal is not None
                return Driver(sp, r, bench.evaluator, session.journal, cache, events,
                              bench.prefetcher, bench.executor, plan)

            with locked_clocks(spec.serve.lock_clocks, spec.serve.lock_clocks_mhz):
                # one search per symptom, and the rest checks (bisect.multi, issue 28)
                multi = run_symptoms(spec, rng, driver, events,
                                     str((session_dir / "spec.toml").absolute()),
                                     workers=bench.executor.workers)
            multi.result = result = whole_session(multi.result, session.journal)
            multi.endpoint_env = env_events.doc(result.evaluations)
        finish(session_dir, multi)
        return result
