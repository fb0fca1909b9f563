"""One session opener: :func:`open_session` opens the builder, the bench (prefetcher,
evaluator, executor: :func:`~vllm_bisect.bisect.bench.open_bench`), the shared result cache and
the core (:func:`~vllm_bisect.bisect.core.open_core`), and closes all of it when the ``with``
block ends, however it ends (an error, Ctrl-C).

Every way in opens its session here: ``vllm-bisect run`` (:mod:`~vllm_bisect.bisect.run_session`:
its drivers assemble one core per symptom over the bench), the ``git bisect run`` hook
(:mod:`~vllm_bisect.bisect.hook`), the studies after the culprit
(:mod:`vllm_bisect.isolate.adapter`: one per measured spec), and the one-commit commands
(``explain``, ``sweep``, ``compare``: no session directory, no journal, no core; explain passes
its profiled probe steps in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import git

from vllm_bisect.bisect.bench import Bench, open_bench
from vllm_bisect.bisect.core import Core, open_core
from vllm_bisect.bisect.events import EventHandler
from vllm_bisect.bisect.measurement.evaluate import PhaseCallback
from vllm_bisect.bisect.measurement.executor import Slot
from vllm_bisect.bisect.measurement.probe_steps import ProbeStep
from vllm_bisect.bisect.policies import Plan
from vllm_bisect.bisect.policies.base import VerdictPolicy
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.state.journal import ResultCache, SessionJournal
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.builders import make_builder
from vllm_bisect.builders.base import Builder
from vllm_bisect.spec import BisectSpec

__all__ = ["CoreOver", "Opened", "open_session"]


@dataclass(frozen=True)
class CoreOver:
    """The core :func:`open_session` assembles: over ``rng``, journaled in ``journal`` (None:
    the session's), judged by ``policy`` (None: one built from the plan) under the settled
    ``plan`` (:func:`~vllm_bisect.bisect.policies.resolve`; None: resolved here)."""

    rng: CommitRange
    journal: SessionJournal | None = None
    policy: VerdictPolicy | None = None
    plan: Plan | None = None


@dataclass(frozen=True)
class Opened:
    """An open session's parts (closed with the ``with`` block of :func:`open_session`)."""

    spec: BisectSpec
    builder: Builder
    bench: Bench
    cache: ResultCache | None   # the shared result cache (None: a one-commit command)
    core: Core | None           # the core asked for (None: none asked for)


@contextmanager
def open_session(spec: BisectSpec, cache_dir: Path, *, session: Session | None = None,
                 logs: Path | None = None, repo: git.Repo | None = None,
                 builder: Builder | None = None,
                 check: Callable[[Builder], None] | None = None,
                 events: EventHandler | None = None, on_phase: PhaseCallback | None = None,
                 slots: list[Slot] | None = None, prefetch: bool = False,
                 tell_waits: bool = True, steps: Sequence[ProbeStep] | None = None,
                 cache: ResultCache | None = None, core: CoreOver | None = None
                 ) -> Iterator[Opened]:
    """Open ``spec``'s session (see the module docstring); everything opened here is closed
    on the way out, in reverse order.

    ``session``: the session directory (journal, id, logs; None: a one-commit command, its
    logs under ``logs``). ``builder``: one the caller shares between sessions (else made for
    ``repo``); ``check``: run on the builder before anything is measured (``run`` refuses an
    endpoint it cannot build). ``events``, ``slots``, ``prefetch``, ``tell_waits``,
    ``on_phase``, ``steps``: the bench's (:func:`~vllm_bisect.bisect.bench.open_bench`).
    ``cache``: a result cache the caller owns; else, with a session, ``CACHE/results.sqlite``
    is opened and closed here. ``core``: the core to assemble over the bench."""
    log_dir = logs if logs is not None else session.logs if session is not None else None
    assert log_dir is not None, "a session or a log directory"
    if builder is None:
        assert repo is not None, "a builder or the repo to build from"
        builder = make_builder(spec, repo, cache_dir, log_dir)
    if check is not None:
        check(builder)
    with ExitStack() as stack:
        if cache is None and session is not None:
            cache = ResultCache(cache_dir / "results.sqlite")
            stack.callback(cache.close)
        bench = open_bench(spec, session, cache_dir, builder, events, logs=log_dir, slots=slots,
                           prefetch=prefetch, tell_waits=tell_waits, on_phase=on_phase,
                           steps=steps)
        stack.callback(bench.close)
        opened = None
        if core is not None:
            journal = core.journal or (session.journal if session is not None else None)
            assert journal is not None, "a core needs a journal"
            opened = open_core(spec, core.rng, journal, cache, bench.executor, events,
                               prefetcher=bench.prefetcher, policy=core.policy,
                               plan=core.plan)
        yield Opened(spec, builder, bench, cache, opened)
