"""The one place a session is wired: builder -> (prefetcher) -> evaluator -> executor.

:func:`open_bench` is what every way into the core measures commits with: ``vllm-bisect
run`` (:mod:`~vllm_bisect.bisect.runner`: the spec's workers, Ray or this host's slots, a
prefetcher beside one local worker), the ``git bisect run`` hook (:mod:`~vllm_bisect.bisect.hook`)
and the studies after the culprit (:mod:`vllm_bisect.isolate.adapter`), both on the first
slot only, pinned as ``run`` pins its first worker. The verdict side is assembled over it by
:func:`~vllm_bisect.bisect.core.open_core`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.bisect.events import EventHandler
from vllm_bisect.bisect.measurement.evaluate import Evaluator
from vllm_bisect.bisect.measurement.executor import (
    Executor,
    InlineExecutor,
    LocalExecutor,
    Slot,
    local_slots,
)
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


def open_bench(spec: BisectSpec, session: Session, cache_dir: Path, builder: Builder,
               events: EventHandler | None = None, *, slots: list[Slot] | None = None,
               prefetch: bool = False, tell_waits: bool = True) -> Bench:
    """The bench over ``builder`` for ``session``: an evaluator (its phases told to
    ``events``) and an executor. ``slots``: this host's slots to run on (None: the spec's
    workers, Ray or this host's slots; ``first_slot(spec)``: one commit judged at a time);
    ``prefetch``: a prefetcher beside one local worker when the spec enables it (a search);
    ``tell_waits``: the waits for a GPU's lock told to ``events`` too."""
    if slots is None and spec.parallel.executor is not ExecutorKind.RAY:
        slots = local_slots(spec)
    prefetcher = (Prefetcher(builder) if prefetch and spec.prefetch_enabled()
                  and slots is not None and len(slots) == 1 else None)
    on_phase = events.on_phase if events is not None else None
    evaluator = Evaluator(spec, prefetcher or builder, session.logs, session.journal,
                          session.id, on_phase=on_phase)
    try:
        executor = make_executor(spec, evaluator, session.path, cache_dir, session.id,
                                 events if tell_waits else None, slots)
    except BaseException:
        if prefetcher is not None:
            prefetcher.close()
        raise
    return Bench(builder, prefetcher, evaluator, executor)
