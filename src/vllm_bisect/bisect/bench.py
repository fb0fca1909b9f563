"""What measures commits: builder -> (prefetcher) -> evaluator -> executor.

:func:`open_bench` is the measuring half of :func:`~vllm_bisect.bisect.wiring.open_session`,
which every way in opens (``vllm-bisect run``: the spec's workers, Ray or this host's slots, a
prefetcher beside one local worker; the ``git bisect run`` hook and the studies after the
culprit: the first slot only, pinned as ``run`` pins its first worker; explain, sweep and
compare: one commit). Its evaluator comes from
:func:`~vllm_bisect.bisect.measurement.evaluate.make_evaluator`, the one factory of an evaluator
(the Ray worker builds its own through it, on its node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.bisect.events import EventHandler
from vllm_bisect.bisect.measurement.evaluate import Evaluator, PhaseCallback, make_evaluator
from vllm_bisect.bisect.measurement.executor import (
    Executor,
    InlineExecutor,
    LocalExecutor,
    Slot,
    local_slots,
)
from vllm_bisect.bisect.measurement.probe_steps import ProbeStep
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.builders.base import Builder
from vllm_bisect.builders.prefetch import Prefetcher
from vllm_bisect.spec import BisectSpec, ExecutorKind


def first_slot(spec: BisectSpec) -> list[Slot]:
    """This host's first slot, pinned as ``run`` pins its first worker (the hook, a study)."""
    return local_slots(spec)[:1]


@dataclass(frozen=True)
class Bench:
    """What measures commits for one session (see the module docstring)."""

    builder: Builder
    prefetcher: Prefetcher | None   # prefetches the next commits' artifacts (one local worker)
    evaluator: Evaluator
    executor: Executor

    def close(self) -> None:
        """Stop the executor's workers, then the prefetcher."""
        try:
            self.executor.close()
        finally:
            if self.prefetcher is not None:
                self.prefetcher.close()


def make_executor(spec: BisectSpec, evaluator: Evaluator, session_dir: Path, cache_dir: Path,
                  session_id: str, events: EventHandler | None,
                  slots: list[Slot] | None = None) -> Executor:
    """The spec's executor: Ray, or this host's slots (one slot: inline, the same pinning,
    per-GPU locks and evaluation code as k). ``events``: told of the waits for a GPU's lock
    (None: not told)."""
    if spec.parallel.executor is ExecutorKind.RAY and slots is None:
        from vllm_bisect.bisect.measurement.ray_executor import RayExecutor

        return RayExecutor(spec, session_dir, cache_dir, session_id)
    slots = slots if slots is not None else local_slots(spec)
    on_wait = None
    if events is not None:
        def on_wait(msg: str) -> None:
            events.on_phase("", msg)

    if len(slots) == 1:
        return InlineExecutor(evaluator.evaluate, slots[0], session=session_id, on_wait=on_wait)
    return LocalExecutor(evaluator.evaluate, slots, session=session_id, on_wait=on_wait)


def open_bench(spec: BisectSpec, session: Session | None, cache_dir: Path, builder: Builder,
               events: EventHandler | None = None, *, logs: Path | None = None,
               slots: list[Slot] | None = None, prefetch: bool = False,
               tell_waits: bool = True, on_phase: PhaseCallback | None = None,
               steps: Sequence[ProbeStep] | None = None) -> Bench:
    """The bench over ``builder`` for ``session`` (None: a one-commit command, no journal;
    its logs under ``logs``): an evaluator (its phases told to ``events``, else to
    ``on_phase``; ``steps`` as :func:`make_evaluator`) and an executor. ``slots``: this
    host's slots to run on (None: the spec's workers, Ray or this host's slots;
    ``first_slot(spec)``: one commit judged at a time); ``prefetch``: a prefetcher beside one
    local worker when the spec enables it (a search); ``tell_waits``: the waits for a GPU's
    lock told to ``events`` too. :func:`~vllm_bisect.bisect.wiring.open_session` opens and
    closes it."""
    if slots is None and spec.parallel.executor is not ExecutorKind.RAY:
        slots = local_slots(spec)
    prefetcher = (Prefetcher(builder) if prefetch and spec.prefetch_enabled()
                  and slots is not None and len(slots) == 1 else None)
    if events is not None:
        on_phase = events.on_phase
    log_dir = logs if logs is not None else session.logs if session is not None else None
    assert log_dir is not None, "a session or a log directory"
    journal, session_id = (session.journal, session.id) if session is not None else (None, "")
    evaluator = make_evaluator(spec, prefetcher or builder, log_dir, journal, session_id,
                               on_phase=on_phase, steps=steps)
    try:
        executor = make_executor(spec, evaluator, session.path if session else log_dir,
                                 cache_dir, session_id, events if tell_waits else None, slots)
    except BaseException:
        if prefetcher is not None:
            prefetcher.close()
        raise
    return Bench(builder, prefetcher, evaluator, executor)
