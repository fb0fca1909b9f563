"""Executors run commit evaluations on workers; the driver alone judges and journals.

An executor has ``workers`` slots. ``submit(commit, more)`` starts an evaluation on a free
slot and returns a task id; ``wait()`` blocks until at least one task finishes and returns
what finished; ``cancel(task)`` stops a task whose verdict is no longer needed (its server is
torn down, its GPUs released; it comes back from ``wait()`` as CANCELLED); ``close()`` cancels
everything in flight and waits for the teardown, so Ctrl-C leaves no server running.

:class:`LocalExecutor` runs each evaluation in a thread of this process, on its slot's GPUs
(``CUDA_VISIBLE_DEVICES`` or the container's device ids) under per-GPU file locks;
:class:`InlineExecutor` is the one-worker case (the same slot code, in the caller's thread);
``vllm_bisect.bisect.measurement.ray_executor.RayExecutor`` runs them as Ray tasks on a cluster.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from vllm_bisect.bisect.policies.base import MoreSamples
from vllm_bisect.errors import FatalError, SpecError
from vllm_bisect.models import EvalStatus, Evaluation
from vllm_bisect.runtime.gpulock import gpu_locks
from vllm_bisect.spec import BisectSpec

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class Slot:
    index: int
    devices: tuple[int, ...] | None = None  # None: not pinned (the simulator, one GPU)

    def describe(self) -> str:
        return f"worker {self.index}" + (
            f" (GPU {','.join(map(str, self.devices))})" if self.devices else "")


@dataclass(frozen=True)
class Done:
    task: int
    commit: str
    evaluation: Evaluation
    worker: str

    @property
    def cancelled(self) -> bool:
        return self.evaluation.status is EvalStatus.CANCELLED


class Executor(Protocol):
    workers: int

    def submit(self, commit: str, more: MoreSamples | None = None) -> int: ...
    def cancel(self, task: int) -> None: ...
    def wait(self, timeout: float | None = None) -> list[Done]: ...
    def in_flight(self) -> int: ...
    def close(self) -> None: ...


class EvaluateFn(Protocol):
    def __call__(self, commit: str, more: MoreSamples | None, *,
                 devices: Sequence[int] | None,
                 cancel: threading.Event | None) -> Evaluation: ...


def parse_gpus(gpus: str | Sequence[int] | None, detected: int) -> list[int] | None:
    """``"auto"`` (every GPU nvidia-smi lists), ``"0,1,2,3"`` or a list; None: no pinning."""
    if gpus is None or gpus == "":
        return None
    if gpus == "auto":
        if detected == 0:
            raise SpecError("--gpus auto found no GPU (nvidia-smi lists none)",
                            hint="pass --workers K to run K simulator workers without GPUs, "
                                 "or list the GPUs: --gpus 0,1")
        return list(range(detected))
    if isinstance(gpus, str):
        try:
            ids = [int(x) for x in gpus.split(",") if x.strip()]
        except ValueError:
            raise SpecError(f"--gpus {gpus!r} is not a list of GPU indices",
                            hint="use --gpus 0,1,2,3 or --gpus auto") from None
    else:
        ids = list(gpus)
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise SpecError(f"--gpus {gpus!r}: give distinct non-negative GPU indices",
                        hint="use --gpus 0,1,2,3 or --gpus auto")
    return ids


def plan_slots(workers: int, gpus: list[int] | None, gpus_per_probe: int) -> list[Slot]:
    """One slot per worker; with GPUs, each slot gets ``gpus_per_probe`` of them (tensor
    parallel), and the number of workers is what the GPUs allow (at most ``workers`` when it
    was given explicitly above 1)."""
    if gpus is None:
        return [Slot(i) for i in range(max(1, workers))]
    if gpus_per_probe < 1 or gpus_per_probe > len(gpus):
        raise SpecError(f"--gpus-per-probe {gpus_per_probe} does not fit {len(gpus)} GPU(s)",
                        hint=f"use a value from 1 to {len(gpus)}")
    fit = len(gpus) // gpus_per_probe
    n = fit if workers <= 1 else min(workers, fit)
    if workers > fit:
        raise SpecError(f"--workers {workers} needs {workers * gpus_per_probe} GPUs; "
                        f"--gpus gives {len(gpus)}",
                        hint="lower --workers or --gpus-per-probe, or list more GPUs")
    return [Slot(i, tuple(gpus[i * gpus_per_probe:(i + 1) * gpus_per_probe]))
            for i in range(n)]


def local_slots(spec: BisectSpec) -> list[Slot]:
    """This host's worker slots for a spec: ``parallel.workers``, each on ``gpus_per_probe``
    of ``parallel.gpus`` when GPUs are given (``--gpus 3``: one worker, pinned to GPU 3)."""
    par = spec.parallel
    detected = 0
    if par.gpus == "auto":
        from vllm_bisect.envinfo import detect

        detected = len(detect().gpus)
    return plan_slots(par.workers, parse_gpus(par.gpus, detected), par.gpus_per_probe)


def run_on_slot(evaluate: EvaluateFn, commit: str, more: MoreSamples | None, slot: Slot,
                cancel: threading.Event, session: str,
                on_wait: Callable[[str], None] | None) -> Evaluation:
    """One evaluation on a slot: pinned to its GPUs under their per-GPU locks (the same for
    one worker or many). A bug in an evaluation is a FAILED one (it must not hang the
    driver); fatal errors propagate."""
    try:
        if slot.devices:
            with gpu_locks(slot.devices, session=session, commit=commit, cancel=cancel,
                           on_wait=on_wait):
                return evaluate(commit, more, devices=slot.devices, cancel=cancel)
        return evaluate(commit, more, devices=None, cancel=cancel)
    except FatalError:
        raise
    except Exception as err:
        logger.exception("evaluation of %s failed", commit[:12])
        status = EvalStatus.CANCELLED if cancel.is_set() else EvalStatus.FAILED
        return Evaluation(commit=commit, status=status, reason=f"{type(err).__name__}: {err}")


class InlineExecutor:
    """One worker: each evaluation runs in the caller's thread when it is submitted, on the
    slot's GPUs under their locks, exactly as a :class:`LocalExecutor` worker would."""

    def __init__(self, evaluate: EvaluateFn, slot: Slot | None = None, *, session: str = "",
                 on_wait: Callable[[str], None] | None = None) -> None:
        self.evaluate = evaluate
        self.slot = slot or Slot(0)
        self.workers = 1
        self.session = session
        self.on_wait = on_wait
        self._done: dict[int, Done] = {}
        self._next = 0

    def submit(self, commit: str, more: MoreSamples | None = None) -> int:
        task, self._next = self._next, self._next + 1
        ev = run_on_slot(self.evaluate, commit, more, self.slot, threading.Event(),
                         self.session, self.on_wait)
        self._done[task] = Done(task, commit, ev, self.slot.describe())
        return task

    def cancel(self, task: int) -> None:
        pass  # it has already run

    def wait(self, timeout: float | None = None) -> list[Done]:
        out = list(self._done.values())
        self._done.clear()
        return out

    def in_flight(self) -> int:
        return len(self._done)

    def close(self) -> None:
        self._done.clear()


class LocalExecutor:
    """Threads on this host, one per running evaluation, each on its own slot."""

    def __init__(self, evaluate: EvaluateFn, slots: Sequence[Slot], *, session: str = "",
                 on_wait: Callable[[str], None] | None = None) -> None:
        self.evaluate = evaluate
        self.slots = list(slots)
        self.workers = len(self.slots)
        self.session = session
        self.on_wait = on_wait
        self._free = list(self.slots)
        self._done: queue.Queue[tuple[int, str, Evaluation, Slot]] = queue.Queue()
        self._tasks: dict[int, tuple[threading.Thread, threading.Event]] = {}
        self._next = 0
        self._fatal: FatalError | None = None

    def in_flight(self) -> int:
        return len(self._tasks)

    def submit(self, commit: str, more: MoreSamples | None = None) -> int:
        if not self._free:
            raise RuntimeError("no free worker")  # the driver never over-submits
        slot = self._free.pop(0)
        task, self._next = self._next, self._next + 1
        cancel = threading.Event()
        t = threading.Thread(target=self._run, args=(task, commit, more, slot, cancel),
                             name=f"eval-{slot.index}-{commit[:8]}")
        self._tasks[task] = (t, cancel)
        t.start()
        return task

    def _run(self, task: int, commit: str, more: MoreSamples | None, slot: Slot,
             cancel: threading.Event) -> None:
        try:
            ev = run_on_slot(self.evaluate, commit, more, slot, cancel, self.session, self.on_wait)
        except FatalError as err:  # the driver raises it (after tearing every worker down)
            self._fatal = self._fatal or err
            ev = Evaluation(commit=commit, status=EvalStatus.FAILED, reason=str(err))
        self._done.put((task, commit, ev, slot))

    def _collect(self, item: tuple[int, str, Evaluation, Slot]) -> Done:
        task, commit, ev, slot = item
        thread, _ = self._tasks.pop(task)
        thread.join()
        self._free.append(slot)
        self._free.sort(key=lambda s: s.index)
        return Done(task, commit, ev, slot.describe())

    def wait(self, timeout: float | None = None) -> list[Done]:
        if not self._tasks:
            return []
        try:
            out = [self._collect(self._done.get(timeout=timeout))]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(self._collect(self._done.get_nowait()))
            except queue.Empty:
                break
        if self._fatal is not None:
            raise self._fatal
        return out

    def cancel(self, task: int) -> None:
        if task in self._tasks:
            self._tasks[task][1].set()

    def close(self) -> None:
        for _, cancel in self._tasks.values():
            cancel.set()
        while self._tasks:
            self._collect(self._done.get())
