"""The Ray executor: each commit evaluation (prepare, serve, probe) is a Ray task.

A task asks for ``parallel.gpus_per_probe`` GPUs (when the cluster has GPUs) and the spec's
custom resources (``{"arch_aarch64": 1}``, ``{"sm_121": 1}``), so GB10/aarch64 probes land on
those nodes. It builds its own artifact on its node (the vLLM checkout must be at the same path
there, or on a shared file system; artifacts are cached per node under the cache dir), and
returns the evaluation and its server logs; the driver alone writes the journal and the logs.
A worker or node lost mid-run is retried by Ray (``max_retries``); after that it is a skip,
never a lost session. ``cancel`` marks the task on a cancel board (a small actor the task
polls): the task's evaluation stops as a local one does, tearing its server down, and returns
CANCELLED. (Ray's own ``ray.cancel`` raises KeyboardInterrupt in the task; on a loaded machine
it was seen to arrive late or never, the server measured or left running.) A task still running
a minute after ``close`` is killed outright, and takes its server with it (parent-death signal).

Ray is an optional extra: ``pip install 'vllm-bisect[ray]'``.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
from pathlib import Path
from typing import Any

from vllm_bisect.bisect.measurement.executor import Done
from vllm_bisect.bisect.policies.base import MoreSamples
from vllm_bisect.errors import FatalError, SpecError, ToolMissing
from vllm_bisect.models import EvalStatus, Evaluation
from vllm_bisect.spec import BisectSpec

logger = logging.getLogger(__name__)
MAX_RETRIES = 2
CANCEL_POLL_S = 0.5


class CancelBoard:
    """A Ray actor: which tasks of one executor were cancelled."""

    def __init__(self) -> None:
        self.tasks: set[int] = set()

    def cancel(self, task: int) -> None:
        self.tasks.add(task)

    def cancelled(self, task: int) -> bool:
        return task in self.tasks


def _watch(board: Any, task: int, cancel: threading.Event, done: threading.Event) -> None:
    """Sets ``cancel`` once the board says this task is cancelled (polled until ``done``)."""
    import ray

    while True:
        try:
            if ray.get(board.cancelled.remote(task), timeout=30):
                cancel.set()
                return
        except Exception as err:  # the driver gone: the task ends on its own
            logger.debug("cancel board unreachable: %s", err)
        if done.wait(CANCEL_POLL_S):
            return


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ToolMissing("--executor ray needs Ray, which is not installed",
                          hint="pip install 'vllm-bisect[ray]'") from None
    return ray


def evaluate_task(spec_json: str, session_id: str, cache_dir: str, commit: str,
                  more: MoreSamples | None, board: Any, task: int
                  ) -> tuple[str, dict[str, str]]:
    """Runs on a Ray worker: one evaluation, with its logs returned as text."""
    import signal

    import ray

    if (signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            and threading.current_thread() is threading.main_thread()):
        # a cluster started with SIGINT ignored: a KeyboardInterrupt (close's escalation)
        # must still stop this task and tear its server down
        signal.signal(signal.SIGINT, signal.default_int_handler)

    from vllm_bisect.bisect.measurement.evaluate import make_evaluator
    from vllm_bisect.bisect.range import open_repo
    from vllm_bisect.builders import make_builder
    from vllm_bisect.runtime.gpulock import gpu_locks

    spec = BisectSpec.model_validate_json(spec_json)
    ids = [int(g) for g in ray.get_gpu_ids()]
    cancel, done = threading.Event(), threading.Event()
    watcher = threading.Thread(target=_watch, args=(board, task, cancel, done), daemon=True,
                               name="vllm-bisect-cancel-board")
    watcher.start()
    try:
        with tempfile.TemporaryDirectory(prefix="vllm-bisect-ray-") as tmp:
            logs = Path(tmp)
            builder = make_builder(spec, open_repo(spec.range.repo), Path(cache_dir), logs)
            evaluator = make_evaluator(spec, builder, logs, None, session_id)
            if ids:
                with gpu_locks(ids, session=session_id, commit=commit):
                    ev = evaluator.evaluate(commit, more, devices=ids, cancel=cancel)
            else:
                ev = evaluator.evaluate(commit, more, cancel=cancel)
            texts = {p.name: p.read_text(encoding="utf-8", errors="replace")
                     for p in logs.iterdir() if p.is_file()}
    finally:
        done.set()
    node = ray.get_runtime_context().get_node_id()
    ev = ev.model_copy(update={"environment": {**ev.environment, "ray_node": node}})
    return ev.model_dump_json(), texts


class RayExecutor:
    def __init__(self, spec: BisectSpec, session_dir: Path, cache_dir: Path,
                 session_id: str) -> None:
        ray = _ray()
        self.ray = ray
        self.spec = spec
        self.session_dir = session_dir
        self.session_id = session_id
        self.cache_dir = cache_dir
        self._refs: dict[int, Any] = {}
        self._commits: dict[int, str] = {}
        self._cancelled: set[int] = set()
        self._next = 0
        par = spec.parallel
        self.started = not ray.is_initialized()
        if self.started:
            try:
                ray.init(address=par.ray_address, include_dashboard=False,
                         logging_level=logging.WARNING, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise FatalError(f"cannot connect to the Ray cluster at "
                                 f"{par.ray_address or '(a new local one)'}: {err}",
                                 hint="check --ray-address (auto, or ray://host:10001) and "
                                      "that `ray status` works there") from None
        cluster = ray.cluster_resources()
        self.num_gpus = par.gpus_per_probe if cluster.get("GPU", 0) >= 1 else 0
        need = {"GPU": float(self.num_gpus), **par.ray_resources}
        fit = []
        for name, amount in need.items():
            if amount <= 0:
                continue
            have = cluster.get(name, 0.0)
            if have < amount:
                self.close()
                raise SpecError(f"no node of the Ray cluster has {amount:g} {name} "
                                f"(the cluster has {have:g})",
                                hint="start a node with that resource (ray start "
                                     "--resources '{\"NAME\": 1}'), or drop --ray-resource")
            fit.append(int(have // amount))
        workers = min(fit) if fit else par.workers
        self.workers = min(workers, par.workers) if par.workers > 1 else workers
        self.workers = max(1, self.workers)
        self.remote = ray.remote(evaluate_task).options(
            num_gpus=self.num_gpus, num_cpus=0, resources=dict(par.ray_resources) or None,
            max_retries=MAX_RETRIES, retry_exceptions=False)
        self.board = ray.remote(CancelBoard).options(num_cpus=0).remote()
        self.spec_json = spec.model_dump_json()
        logger.info("Ray executor: %d workers, %d GPU(s) and %s per probe", self.workers,
                    self.num_gpus, par.ray_resources or "no custom resources")

    def in_flight(self) -> int:
        return len(self._refs)

    def submit(self, commit: str, more: MoreSamples | None = None) -> int:
        task, self._next = self._next, self._next + 1
        self._refs[task] = self.remote.remote(self.spec_json, self.session_id,
                                              str(self.cache_dir), commit, more,
                                              self.board, task)
        self._commits[task] = commit
        return task

    def cancel(self, task: int) -> None:
        if task in self._refs and task not in self._cancelled:
            self._cancelled.add(task)
            self.board.cancel.remote(task)

    def _result(self, task: int) -> Done:
        ref = self._refs.pop(task)
        commit = self._commits.pop(task)
        ray = self.ray
        try:
            ev_json, logs = ray.get(ref)
            try:
                ev = Evaluation.model_validate_json(ev_json)
            except ValueError as err:
                raise FatalError(f"a Ray worker sent a result this driver cannot read: {err}",
                                 hint="install the same vllm-bisect version on every node "
                                      "and on the driver") from None
            log_dir = self.session_dir / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            for name, text in logs.items():
                (log_dir / name).write_text(text)
        except ray.exceptions.TaskCancelledError:
            ev = Evaluation(commit=commit, status=EvalStatus.CANCELLED, reason="cancelled")
        except ray.exceptions.RayTaskError as err:
            if isinstance(err.cause, FatalError):
                raise err.cause from None
            ev = Evaluation(commit=commit, status=EvalStatus.FAILED,
                            reason=f"the Ray task failed: {type(err.cause).__name__}: {err.cause}")
        except ray.exceptions.RayError as err:  # worker or node lost, retries used up
            ev = Evaluation(commit=commit, status=EvalStatus.FAILED,
                            reason=f"lost after {MAX_RETRIES} retries: {type(err).__name__}")
        if task in self._cancelled and ev.status is not EvalStatus.MEASURED:
            # what a cancelled task sends back unmeasured (a server its cancel stopped, a task
            # that failed or was lost after it) is the cancel's doing, never a judgement
            ev = ev.model_copy(update={"status": EvalStatus.CANCELLED,
                                       "reason": f"cancelled ({ev.reason})"})
        self._cancelled.discard(task)
        return Done(task, commit, ev, "ray")

    def wait(self, timeout: float | None = None) -> list[Done]:
        if not self._refs:
            return []
        by_ref = {ref: task for task, ref in self._refs.items()}
        ready, _ = self.ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        return [self._result(by_ref[r]) for r in ready]

    def close(self) -> None:
        for task in list(self._refs):
            self.cancel(task)
        for force in (False, True):
            deadline = 60.0
            while self._refs and self.wait(timeout=deadline):
                pass
            if not self._refs:
                break
            for ref in self._refs.values():  # still running after a minute: kill the workers
                self.ray.cancel(ref, force=True)
            if force:
                self._refs.clear()
        board, self.board = getattr(self, "board", None), None
        if board is not None:
            with contextlib.suppress(Exception):  # the cluster may be gone already
                self.ray.kill(board)
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
            self.started = False
