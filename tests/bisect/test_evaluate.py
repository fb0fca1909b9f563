"""The evaluator's contract under hostile servers and unforeseen errors: one bad commit is a
skip with its reason, never an aborted bisect (and a resume does not hit it again)."""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path

from tests.bisect.test_driver import run_driver
from tests.builders.test_command import sim_env
from tests.config_specs import config_spec
from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.measurement.evaluate import Evaluator
from vllm_bisect.bisect.range import commit_range, open_repo
from vllm_bisect.bisect.state.journal import ResultCache
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.builders import Artifact, Builder, make_builder
from vllm_bisect.models import EvalStatus, Verdict
from vllm_bisect.sim.config_history import generate_config_history
from vllm_bisect.spec import BisectSpec

HOSTILE = Path(__file__).resolve().parents[1] / "probes" / "hostile_sse.py"


def test_a_hostile_stream_at_one_commit_is_a_skip(tmp_path: Path) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=6, gen_cap_at=4)
    spec = config_spec(h, "length", sim_env(tmp_path), startup_timeout_s=30)
    evil = h.shas[3]  # the last good commit: the search must test it
    serve = (f"if [ {{commit}} = {evil} ]; then exec {sys.executable} {HOSTILE} {{port}} "
             "text-int; fi; sh serve.sh {port}")
    r = run_driver(spec.with_overrides(build={"serve": serve}), tmp_path)
    (o,) = [o for o in r.probed if o.commit == evil]
    assert o.verdict is Verdict.SKIP
    assert "StreamFormatError" in o.reason and "'text' is a int" in o.reason
    assert r.first_bad is None and r.candidates == [h.shas[3], h.shas[4]]


class Unforeseen:
    """A builder that hits an unforeseen error at one commit: in prepare, or (``late``) in
    the measurement, through an artifact that cannot be launched."""

    def __init__(self, inner: Builder, commit: str, late: bool) -> None:
        self.inner, self.commit, self.late = inner, commit, late
        self.calls: list[str] = []

    def prepare(self, commit: str) -> Artifact:
        self.calls.append(commit)
        a = self.inner.prepare(commit)
        if commit != self.commit:
            return a
        if not self.late:
            raise RecursionError("maximum recursion depth exceeded")
        return dataclasses.replace(a, serve_template="{no_such_field}")


def _run(spec: BisectSpec, tmp: Path, evil: str, late: bool) -> tuple[list[str], object]:
    repo = open_repo(spec.range.repo)
    rng = commit_range(repo, spec.range.good, spec.range.bad)
    with Session(tmp / "session") as s:
        assert s.journal is not None
        b = Unforeseen(make_builder(spec, repo, tmp / "cache", s.logs), evil, late)
        ev = Evaluator(spec, b, s.logs, s.journal, s.id)
        cache = ResultCache(tmp / "cache" / "results.sqlite")
        return b.calls, Driver(spec, rng, ev, s.journal, cache).run()


def test_an_unforeseen_error_is_a_skip_and_a_resume_does_not_abort(tmp_path: Path) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=6, gen_cap_at=4)
    spec = config_spec(h, "length", sim_env(tmp_path), startup_timeout_s=30)
    evil = h.shas[3]
    for late in (False, True):
        tmp = tmp_path / str(late)
        calls, r = _run(spec, tmp, evil, late)
        assert calls.count(evil) == 1 + spec.ops.retries  # failed: tried on fresh servers
        (o,) = [o for o in r.probed if o.commit == evil]  # type: ignore[attr-defined]
        assert o.verdict is Verdict.SKIP
        want = "KeyError" if late else "RecursionError"
        assert "internal error" in o.reason and want in o.reason, o.reason
        log = tmp / "session" / "logs" / f"error-{evil[:12]}.log"
        assert f"(log: {log})" in o.reason and "Traceback" in log.read_text()
        ev = r.evaluations[evil]  # type: ignore[attr-defined]
        assert ev.status is EvalStatus.FAILED
        calls, again = _run(spec, tmp, evil, late)  # resume the same session
        assert evil not in calls  # recorded: not measured (nor raised) again
        assert again.candidates == r.candidates  # type: ignore[attr-defined]


def test_the_catch_all_does_not_swallow_cancellation(tmp_path: Path) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=2)
    spec = config_spec(h, "length", sim_env(tmp_path), startup_timeout_s=30)
    repo = open_repo(spec.range.repo)
    stop = threading.Event()
    stop.set()
    ev = Evaluator(spec, make_builder(spec, repo, tmp_path / "c", tmp_path / "l"), tmp_path / "l")
    assert ev.evaluate(h.bad, cancel=stop).status is EvalStatus.CANCELLED
