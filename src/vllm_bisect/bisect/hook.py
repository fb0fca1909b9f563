"""``git bisect run vllm-bisect hook --spec S``: judge HEAD; 0 good, 1 bad, 125 skip.

The range section of the spec is ignored. When the verdict needs the good endpoint's ITL
(``itl_factor``), the reference is git bisect's own good commit (``refs/bisect/good-*``),
else ``range.good``; it is measured once and cached like every other commit.
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path

import git

from vllm_bisect.bisect.evaluate import Evaluator
from vllm_bisect.bisect.journal import ResultCache
from vllm_bisect.bisect.range import open_repo, resolve
from vllm_bisect.bisect.session import Session
from vllm_bisect.bisect.terms import Terms
from vllm_bisect.builders import make_builder
from vllm_bisect.errors import SpecError, untestable_hint
from vllm_bisect.models import Evaluation, Outcome, Verdict
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict import Judge


class HookExit(IntEnum):
    GOOD = 0
    BAD = 1
    SKIP = 125
    ABORT = 128


EXIT_FOR = {Verdict.GOOD: HookExit.GOOD, Verdict.BAD: HookExit.BAD, Verdict.SKIP: HookExit.SKIP}


def bisect_good_ref(repo: git.Repo, spec: BisectSpec) -> str | None:
    goods = [r for r in repo.refs if r.path.startswith("refs/bisect/good")]
    if goods:
        return goods[0].commit.hexsha
    return spec.range.good


def run_hook(spec: BisectSpec, cwd: Path, cache_dir: Path) -> Outcome:
    repo = open_repo(cwd)
    head = repo.head.commit.hexsha
    session_dir = Path(repo.git_dir) / "vllm-bisect-hook"
    cache = ResultCache(cache_dir / "results.sqlite")
    with Session(session_dir) as session:
        assert session.journal is not None
        builder = make_builder(spec, repo, cache_dir, session.logs)
        evaluator = Evaluator(spec, builder, session.logs, session.journal, session.id)

        def measured(sha: str) -> Evaluation:
            key = spec.measurement_key(sha)
            ev = cache.get(key)
            if ev is None:
                ev = evaluator.evaluate(sha)
                cache.put(key, ev)
            return ev

        judge = Judge(spec.verdict, spec.min_output_tokens())
        terms = Terms(spec.range.search)  # fix: exit 0 = has the problem (old), 1 = fixed
        if judge.needs_reference:
            ref = spec.range.bad if terms.fix else bisect_good_ref(repo, spec)
            if ref is None:
                raise SpecError("verdict.itl_factor needs a good reference commit",
                                hint="run under `git bisect` after `git bisect good <ref>`, "
                                     "set range.good, or use verdict.max_itl_ms")
            good = measured(resolve(repo, ref, "good").hexsha)
            if good.measurement is None:
                raise SpecError(f"the good reference {ref[:12]} could not be measured: "
                                f"{good.reason}", hint=untestable_hint(good.reason))
            judge = judge.with_reference(good.measurement)
        ev = measured(head)
        if ev.measurement is None:
            outcome = Outcome(commit=head, verdict=Verdict.SKIP, reason=ev.reason)
        else:
            j = judge.judge(ev.measurement)
            outcome = Outcome(commit=head, verdict=terms.verdict(j.verdict), reason=j.reason,
                              measurement=ev.measurement)
        session.journal.record(spec.measurement_key(head), outcome, ev)
    return outcome
