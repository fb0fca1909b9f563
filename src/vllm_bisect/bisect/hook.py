"""``git bisect run vllm-bisect hook --spec S``: judge HEAD; 0 good, 1 bad, 125 skip.

HEAD is judged by the same :class:`~vllm_bisect.bisect.policies.base.VerdictPolicy` as
``vllm-bisect run``, with git bisect's own endpoints: the old (good) and new (bad) commits it
was started with (its log, in its terms; else its refs; else ``range.good`` / ``range.bad``;
the rest of the range section is ignored). With ``range.search = "fix"`` the exit codes are in
old/new terms (0 = has the problem, 1 = fixed) and the fixed end is the reference. A policy
that needs the healthy endpoint (``itl_factor``, correctness, throughput) or calibrates on both
(``sequential``) measures them once; they are cached like every other commit and reused by
later hook calls. Each bisect (endpoints + spec) keeps a journal under
``.git/vllm-bisect-hook/``; its earlier verdicts are replayed in order, so a learning policy
judges HEAD in the state ``run`` would. Under ``strategy = "changepoint"`` HEAD is answered
from the model of the range rebuilt from every server of the bisect's journal
(:mod:`~vllm_bisect.bisect.search.changepoint_hook`). Following ``symptom = "crash"``, a server that dies
is bad, as in ``run``. A strategy that cannot work one commit at a time under git's control
(``bayes``) is refused at once (exit 128); so is, after ``run``'s endpoint check on the first
call, a cap or correctness change that ``auto`` finds shows in some runs only. Under
``git bisect``, the first call measures git's good and bad ends (cached like any commit) and
stops the bisect (exit 128, both measurements in the message) unless the good end judges
good and the bad end bad, as ``run`` refuses such a range.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import git

from vllm_bisect.bisect.bench import first_slot
from vllm_bisect.bisect.events import EventHandler
from vllm_bisect.bisect.measurement.executor import Slot
from vllm_bisect.bisect.policies import Plan, resolve
from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.range import CommitInfo, CommitRange, commit_range, info, open_repo
from vllm_bisect.bisect.search.changepoint_hook import HookSearch
from vllm_bisect.bisect.search.endpoints import (
    Settle,
    check_endpoints,
    intermittence,
    intermittence_applies,
    prefetch_first,
    settle,
)
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.bisect.wiring import CoreOver, open_session
from vllm_bisect.errors import NotReproduced, RangeError, SpecError, storage_fault
from vllm_bisect.models import Outcome, Phase, Verdict
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict.auto import Choice, Strategy


class HookExit(IntEnum):
    GOOD = 0
    BAD = 1
    SKIP = 125
    ABORT = 128


EXIT_FOR = {Verdict.GOOD: HookExit.GOOD, Verdict.BAD: HookExit.BAD, Verdict.SKIP: HookExit.SKIP}


@dataclass(frozen=True)
class HookResult:
    """HEAD's outcome, and what this call read back from the bisect's journal (``journal``:
    its directory under ``.git/vllm-bisect-hook/``): ``reused`` verdicts judged by earlier
    hook calls (``head_reused``: HEAD's own among them, so HEAD was not measured again)."""

    outcome: Outcome
    journal: Path
    reused: int
    head_reused: bool


def _terms(git_dir: Path) -> tuple[str, str]:
    """git bisect's (old, new) terms: good/bad, or ``--term-old`` / ``--term-new``."""
    try:
        new, old = (Path(git_dir) / "BISECT_TERMS").read_text().split()[:2]
        return old, new
    except (OSError, ValueError):
        return "good", "bad"


def bisect_refs(repo: git.Repo, spec: BisectSpec) -> tuple[str | None, str | None]:
    """The old (good) and new (bad) commits git bisect was started with: the first of each
    in its log (they stay put while ``refs/bisect/bad`` moves and ``good-*`` refs pile up),
    else its refs, else the spec's range."""
    old_term, new_term = _terms(Path(repo.git_dir))
    logged = re.compile(rf"# ({re.escape(old_term)}|{re.escape(new_term)}): \[([0-9a-f]{{40}})\]")
    found: dict[str, str] = {}
    log = Path(repo.git_dir) / "BISECT_LOG"
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            if (m := logged.match(line)) and m.group(1) not in found:
                found[m.group(1)] = m.group(2)
    olds = sorted(r.path for r in repo.refs if r.path.startswith(f"refs/bisect/{old_term}-"))
    news = [r for r in repo.refs if r.path == f"refs/bisect/{new_term}"]
    good = found.get(old_term) or (repo.commit(olds[0]).hexsha if olds else spec.range.good)
    bad = found.get(new_term) or (news[0].commit.hexsha if news else spec.range.bad)
    return good, bad


def _hook_dir(repo: git.Repo, spec: BisectSpec, good: str | None, bad: str | None) -> Path:
    """One journal per bisect: its endpoints and everything but the range in the spec."""
    blob = f"{good}:{bad}:{spec.model_dump_json(exclude={'range'})}"
    return Path(repo.git_dir) / "vllm-bisect-hook" / hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_hook(spec: BisectSpec, cwd: Path, cache_dir: Path,
             events: EventHandler | None = None) -> HookResult:
    """Judge HEAD; ``events``: progress (each commit tested, each server started), so a
    first call that also checks the endpoints is never silent for long."""
    plan = resolve(spec)   # (auto: the model of the range answers the hook too)
    choice = plan.choice
    if not plan.hook_ok:
        written = str(spec.verdict.strategy)
        chosen = (f"verdict.strategy = {written!r}" if written == choice.strategy.value else
                  f"verdict.strategy = {written!r} (resolved to {choice.strategy.value!r}: "
                  f"{choice.reason})")
        raise SpecError(f"{chosen} cannot judge one "
                        "commit at a time under `git bisect run` (it runs commits again and "
                        "chooses which)",
                        hint="use `vllm-bisect run --spec S` for it, or a threshold or "
                             "sequential strategy with the hook")
    try:
        repo = open_repo(cwd)   # the hook judges the checkout it runs in (range.repo unused)
    except RangeError as e:
        raise RangeError(e.message, hint=f"the hook judges HEAD of the git checkout it runs "
                         f"in ({cwd}); run `git bisect run vllm-bisect hook --spec S` inside "
                         "your vLLM checkout (range.repo is not used by the hook)") from None
    head = info(repo.head.commit)
    good_ref, bad_ref = bisect_refs(repo, spec)
    rng: CommitRange | None = None
    check_runs = intermittence_applies(spec, choice) and good_ref and bad_ref
    # under `git bisect`, the ends are checked once, as `run` checks them (a calibrating
    # policy checks them as it calibrates, on every call)
    check_ends = bool(_under_bisect(repo) and good_ref and bad_ref)
    if check_runs or check_ends:
        assert good_ref and bad_ref
        rng = commit_range(repo, good_ref, bad_ref, spec.range.first_parent)
    if plan.needs_reference or plan.models_range:  # (else the range is not needed)
        if not (good_ref and bad_ref):
            raise SpecError(f"verdict.strategy {str(spec.verdict.strategy)!r} with these "
                            "thresholds needs git bisect's good and bad commits",
                            hint="run under `git bisect` after `git bisect good/bad <ref>`, "
                                 "or set range.good and range.bad")
        rng = commit_range(repo, good_ref, bad_ref, spec.range.first_parent)
    slots = first_slot(spec)  # pinned as `run` pins its first worker
    session_dir = _hook_dir(repo, spec, good_ref, bad_ref)
    try:
        return _judge(spec, repo, cache_dir, session_dir, slots, rng, head, plan,
                      bool(check_runs), check_ends, events)
    except (OSError, sqlite3.DatabaseError) as err:  # a full disk is named, never "damaged"
        fault = storage_fault(err, session_dir) or storage_fault(err, cache_dir)
        if fault is not None:
            raise fault from None
        raise


def _judge(spec: BisectSpec, repo: git.Repo, cache_dir: Path, session_dir: Path,
           slots: list[Slot], rng: CommitRange | None, head: CommitInfo, plan: Plan,
           check_runs: bool, check_ends: bool,
           events: EventHandler | None = None) -> HookResult:
    choice = plan.choice
    one = rng or CommitRange(good=head, bad=head, commits=(head,))
    with Session(session_dir) as session, \
            open_session(spec, cache_dir, session=session, repo=repo, events=events,
                         slots=slots, core=CoreOver(one, plan=plan)) as opened:
        assert opened.core is not None
        t = opened.core.tester
        journaled = set(t.store.session)   # verdicts of this bisect's earlier hook calls
        if plan.models_range:   # HEAD's side from the model of the range, from every server
            assert rng is not None
            outcome = HookSearch(t).judge(head.sha)
            return HookResult(outcome, session_dir, len(journaled),
                              t.store.key(head.sha) in journaled)
        if check_runs:
            _refuse_if_intermittent(t, spec, choice, session_dir)
        if check_ends and not t.policy.traits.needs_calibration:
            _check_ends_once(t, session_dir)
        if rng is not None and plan.needs_reference:
            settle(t, Settle.HOOK)
        _replay(t, head.sha)
        outcome = t.test(head, Role.BISECT, 0)
        return HookResult(outcome, session_dir, len(journaled),
                          t.store.key(head.sha) in journaled)


def _under_bisect(repo: git.Repo) -> bool:
    """``git bisect start`` has run and ``git bisect reset`` not yet."""
    return (Path(repo.git_dir) / "BISECT_START").exists()


def _check_ends_once(t: Tester, session_dir: Path) -> None:
    """git's good and bad ends measured and checked as ``run`` checks them (the good end
    judged good, the bad end bad; else NotReproduced: exit 128, with both measurements), on
    the bisect's first hook call; cached and journaled like any commit, and marked done
    beside the journal so later calls neither measure nor judge them again."""
    mark = session_dir / "ends-checked"
    if mark.exists():
        return
    rng, terms = t.rng, t.terms
    with t.measurer.during(Phase.ENDPOINTS):
        prefetch_first(t)
        judged = {o.commit: o for o in (t.test(end, role, 0) for end, role in terms.endpoints(rng))}
    good, bad = judged[rng.good.sha], judged[rng.bad.sha]
    if Verdict.SKIP in (good.verdict, bad.verdict):
        check_endpoints(t, good, bad)  # "could not be tested", with its own hint
    if good.verdict is not Verdict.GOOD or bad.verdict is not Verdict.BAD:
        raise NotReproduced(
            f"git bisect's ends do not reproduce the symptom: {terms.old} end "
            f"{rng.good.sha[:12]} judged {good.verdict} ({good.reason}), {terms.new} end "
            f"{rng.bad.sha[:12]} judged {bad.verdict} ({bad.reason}); expected {terms.old} "
            f"and {terms.new}, so no commit between them can be judged on it",
            hint="change the verdict threshold (verdict.*) to lie between the two "
                 "measurements above, or start `git bisect` with other good and bad commits")
    mark.write_text(f"{rng.good.sha} {rng.bad.sha}\n")


def _refuse_if_intermittent(t: Tester, spec: BisectSpec, choice: Choice,
                            session_dir: Path) -> None:
    """``run``'s check (auto on a cap or a correctness change: does the bad endpoint show it in
    every run?), once per bisect: its answer is kept beside the hook's journal. A symptom that
    shows in some runs only needs bayes, which git bisect cannot drive: refused (exit 128)."""
    mark = session_dir / "intermittence.txt"
    if mark.exists():
        found = mark.read_text()
    else:
        new = intermittence(t, spec, choice)
        found = new.reason if new is not None and new.strategy is Strategy.BAYES else ""
        mark.write_text(found)
    if found:
        raise SpecError(f"{found}; `git bisect run` cannot run commits again where they tell "
                        "most", hint="use `vllm-bisect run --spec S` (it bisects this under "
                                     "bayes), or write verdict.strategy = \"threshold\" to judge "
                                     "each commit on one run anyway")


def _replay(t: Tester, head: str) -> None:
    """The commits this bisect's hook judged before, judged again and learned from in order
    (``Tester.replay``): each hook call is a process of its own, so a learning policy's model
    is rebuilt from the journal as ``run`` built it; the endpoints and HEAD itself excepted."""
    skip = {t.store.key(c) for c in (t.rng.good.sha, t.rng.bad.sha, head)}
    t.replay([ev for key, ev in t.store.session.items() if key not in skip], Role.BISECT)
