"""Measure one commit: prepare its artifact, serve it, probe it, always tear down.

Every recoverable failure becomes an :class:`Evaluation` that is not MEASURED (a skip);
fatal errors propagate. One :class:`Evaluator` serves every worker thread: what belongs to
one call (artifact, launch plan, GPUs, env, logs, cancel) travels down in an
:class:`~vllm_bisect.bisect.measurement.probe_steps.EvalCall`; what is probed is an explicit list of
steps (:mod:`vllm_bisect.bisect.measurement.probe_steps`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_bisect.bisect.measurement.probe_steps import (
    EvalCall,
    ProbeStep,
    plain_steps,
    server_steps,
    with_mtp_off,
)
from vllm_bisect.bisect.policies.base import MoreSamples
from vllm_bisect.bisect.state import unrecorded
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.builders import Artifact, ArtifactKind, Builder
from vllm_bisect.builders.base import prepare
from vllm_bisect.envinfo import fingerprint
from vllm_bisect.errors import (
    ArtifactUnavailable,
    Cancelled,
    FatalError,
    NetworkUnavailable,
    ProbeError,
    RecoverableError,
    ServeError,
    WrongModel,
    disk_full,
)
from vllm_bisect.models import EvalStatus, Evaluation, FailureKind, Measurement
from vllm_bisect.probes.vllm_bench import bench_throughput
from vllm_bisect.runtime.base import ServerHandle, artifact_json, server_env
from vllm_bisect.runtime.launch import Launcher, ServerSpec, launch_plan, launcher_for
from vllm_bisect.spec import BisectSpec, ImageBuild, ServeSpec

if TYPE_CHECKING:
    import docker

logger = logging.getLogger(__name__)

PhaseCallback = Callable[[str, str], None]  # (commit, phase)


def make_evaluator(spec: BisectSpec, builder: Builder, logs: Path,
                   journal: SessionJournal | None = None, session_id: str = "", *,
                   on_phase: PhaseCallback | None = None,
                   steps: Sequence[ProbeStep] | None = None) -> Evaluator:
    """The evaluator of ``spec``'s commits, their artifacts from ``builder`` (or its
    prefetcher), server logs under ``logs``, prepared artifacts journaled in ``journal``;
    ``steps``: what its servers probe (None: the spec's, ``server_steps(spec)``; explain
    passes its profiled ones)."""
    return Evaluator(spec, builder, logs, journal, session_id, on_phase=on_phase, steps=steps)


class Evaluator:
    def __init__(self, spec: BisectSpec, builder: Builder, log_dir: Path,
                 journal: SessionJournal | None = None, session_id: str = "",
                 on_phase: PhaseCallback | None = None,
                 steps: Sequence[ProbeStep] | None = None) -> None:
        """``steps``: what each server probes, in order (None: the spec's,
        ``server_steps(spec)``)."""
        self.spec = spec
        self.builder = builder
        self.log_dir = log_dir
        self.journal = journal
        self.session_id = session_id
        self.on_phase = on_phase
        self.steps = list(steps) if steps is not None else server_steps(spec)
        self._docker: docker.DockerClient | None = None
        self._docker_lock = threading.Lock()
        # commit -> the artifact this run prepared for it (the endpoints' environment diff
        # reads them: bisect/endpoint_env.py); written by the worker threads
        self.artifacts: dict[str, Artifact] = {}

    def container_client(self) -> docker.DockerClient:
        """The docker client for the container runtime (created on first use; reaps orphans)."""
        with self._docker_lock:
            if self._docker is None:
                from vllm_bisect.builders.dockerd import docker_client
                from vllm_bisect.runtime.container import reap_orphans

                client = docker_client()
                for name in reap_orphans(client):
                    logger.warning("removed container %s left by an earlier run", name)
                self._docker = client
            return self._docker

    def _phase(self, commit: str, phase: str) -> None:
        logger.info("%s: %s", commit[:12], phase)
        if self.on_phase is not None:
            self.on_phase(commit, phase)

    def evaluate(self, commit: str, more: MoreSamples | None = None, *,
                 devices: Sequence[int] | None = None,
                 cancel: threading.Event | None = None) -> Evaluation:
        """Measure one commit. ``devices``: the GPUs this evaluation may use (its worker's
        slot: CUDA_VISIBLE_DEVICES, or the container's device ids). ``cancel``: set from
        another thread to stop it (the server is torn down; the result is CANCELLED)."""
        extra = {} if devices is None else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))}
        call = EvalCall(commit=commit, log_dir=self.log_dir, more=more,
                        devices=None if devices is None else tuple(devices), cancel=cancel,
                        phase=self._phase, env=extra,
                        pass_env=tuple(self.spec.serve.pass_env))
        env = fingerprint(server_env(self.spec.serve, extra=extra))
        cancelled = Evaluation(commit=commit, status=EvalStatus.CANCELLED, reason="cancelled",
                               environment=env)
        if call.cancelled():
            return cancelled
        call.say("preparing artifact")
        try:
            artifact = prepare(self.builder, commit, cancel)
        except Cancelled:
            return cancelled
        except ArtifactUnavailable as err:
            return Evaluation(commit=commit, status=EvalStatus.UNAVAILABLE, reason=err.message,
                              log_tail=err.log_tail, log=err.log, environment=env,
                              transient=not err.final, hint=err.hint,
                              network=isinstance(err, NetworkUnavailable))
        except FatalError:
            raise
        except Exception as err:  # a bug or an unforeseen input: skip this commit only
            return self._internal(call, "preparing its artifact", err, env, None)
        self.artifacts[commit] = artifact
        if self.journal is not None:
            self.journal.artifact_prepared(commit, artifact_json(artifact))
        call = dataclasses.replace(call, artifact=artifact)
        try:
            return self._measure(call, env, cancelled)
        except FatalError:
            raise
        except Exception as err:
            return self._internal(call, "measuring it", err, env, artifact.identity)

    def _measure(self, call: EvalCall, env: dict[str, object], cancelled: Evaluation
                 ) -> Evaluation:
        artifact = call.artifact
        assert artifact is not None
        try:
            if call.cancelled():
                raise Cancelled("cancelled after the artifact was ready")
            final = self.spec.probe.mtp_speedup is None or self.spec.serve.speculative is None
            bench = self.spec.probe.bench
            final = final and (bench is None or bench.kind != "throughput")
            m, startup = self._serve_and_probe(
                call, self.spec.serve, self.steps,
                keep=self._keeper(call, env) if final else None)
            if self.spec.probe.mtp_speedup is not None and self.spec.serve.speculative is not None:
                m = self._mtp_off(call, m)
            m = self._offline(call, m)
        except RecoverableError as err:
            if isinstance(err, Cancelled) or call.cancelled():
                return cancelled.model_copy(update={"artifact": artifact.identity})
            where = f" (log: {err.log})" if err.log is not None else ""
            return Evaluation(commit=call.commit, status=EvalStatus.FAILED,
                              reason=f"{type(err).__name__}: {err.message}{where}",
                              failure=failure_kind(err), log=err.log,
                              log_tail=err.log_tail, artifact=artifact.identity, environment=env)
        return measured(call, m, startup, env)

    def _keeper(self, call: EvalCall, env: dict[str, object]
                ) -> Callable[[Measurement, float | None], None] | None:
        """What keeps a finished measurement in the journal before its server is torn down
        (``bisect/state/unrecorded.py``): a run killed during the teardown loses nothing."""
        journal = self.journal
        if journal is None:
            return None

        def keep(m: Measurement, startup: float | None) -> None:
            unrecorded.keep(journal, self.spec.measurement_key(call.commit),
                            measured(call, m, startup, env))
        return keep

    def _internal(self, call: EvalCall, doing: str, err: Exception, env: dict[str, object],
                  artifact: str | None) -> Evaluation:
        """An unexpected exception while measuring one commit: a skip with its reason (the
        traceback goes to the log), never an aborted bisect; a full disk stops the run."""
        fault = disk_full(err, f"while {doing}")
        if fault is not None:
            raise fault from None
        log = call.log("error")
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as fh:
                fh.write("".join(traceback.format_exception(err)) + "\n")
            where, written = f" (log: {log})", log
        except OSError:
            where, written = "", None
        logger.warning("%s: unexpected %s while %s: %s%s", call.commit[:12], type(err).__name__,
                       doing, err, where)
        return Evaluation(commit=call.commit, status=EvalStatus.FAILED, artifact=artifact,
                          failure=FailureKind.INTERNAL, log=written,
                          reason=f"internal error while {doing} ({type(err).__name__}: "
                                 f"{str(err)[:300]}){where}", environment=env)

    def _mtp_off(self, call: EvalCall, m: Measurement) -> Measurement:
        """The MTP speed-up's other arm: the same load on a server without speculation."""
        serve = self.spec.serve.model_copy(update={"speculative": None})
        off, _ = self._serve_and_probe(dataclasses.replace(call, log_dir=call.log_dir / "no-spec"),
                                       serve, plain_steps(self.spec))
        assert off.load_cells and m.mtp_cells
        return with_mtp_off(m, off.load_cells)

    def _offline(self, call: EvalCall, m: Measurement) -> Measurement:
        """``vllm bench throughput``: offline, no server, with the artifact's vllm."""
        bench = self.spec.probe.bench
        if bench is None or bench.kind != "throughput":
            return m
        assert call.artifact is not None
        kind = call.artifact.kind
        if kind is ArtifactKind.IMAGE or kind is ArtifactKind.URL:
            raise ProbeError("vllm bench throughput runs only with a local vllm "
                             f"(not a {kind.value} artifact)",
                             hint='use probe.bench.kind = "serve"')
        call.say("vllm bench throughput (offline)")
        if call.plan is None:  # the env the server would get
            call = dataclasses.replace(call, plan=launch_plan(call.artifact, self.spec.serve, 0))
        return m.model_copy(update={"bench": bench_throughput(
            call.vllm, self.spec.serve.model, bench.args, log=call.log("bench"),
            env=call.bench_env, timeout_s=self.spec.ops.bench_timeout_s)})

    def _probe(self, call: EvalCall, handle: ServerHandle, steps: list[ProbeStep]
               ) -> Measurement:
        m: Measurement | None = None
        with _stop_on(call.cancel, handle):
            for step in steps:
                m = step.run(call, handle, m)
        assert m is not None
        return m

    def launcher(self, kind: ArtifactKind) -> Launcher:
        """The runtime's launcher for an artifact kind (:mod:`vllm_bisect.runtime.launch`)."""
        build = self.spec.build if isinstance(self.spec.build, ImageBuild) else None
        return launcher_for(kind, build=build, client=self.container_client)

    def _serve_and_probe(self, call: EvalCall, serve: ServeSpec, steps: list[ProbeStep],
                         keep: Callable[[Measurement, float | None], None] | None = None
                         ) -> tuple[Measurement, float | None]:
        """Start the server, probe it; ``keep``: called with the measurement while the
        server is still up (before its teardown)."""
        artifact = call.artifact
        assert artifact is not None
        call = dataclasses.replace(call, plan=launch_plan(artifact, serve, 0))
        log = call.log("serve")
        log.parent.mkdir(parents=True, exist_ok=True)
        ops = self.spec.ops
        server = ServerSpec(serve=serve, log_path=log, timeout_s=ops.startup_timeout_s,
                            serialize_startup=ops.serialize_startup, cancel=call.cancel,
                            devices=call.devices, session_id=self.session_id,
                            hf_cache=ops.hf_cache, on_start=self._started(call.commit),
                            on_stop=self._stopped)
        if artifact.kind is ArtifactKind.IMAGE:
            call.say(f"starting container {artifact.image}")
        elif artifact.kind is not ArtifactKind.URL:
            call.say("starting server")
        with self.launcher(artifact.kind).serve(artifact, server) as h:
            call.say("probing" if h.startup_s is None
                     else f"probing ({h.startup_s:.1f} s to healthy)")
            m = self._probe(call, h, steps)
            if keep is not None:
                keep(m, h.startup_s)
            return m, h.startup_s

    def _started(self, commit: str) -> Callable[[int], None]:
        def cb(pid: int) -> None:
            if self.journal is not None:
                self.journal.server_started(pid, commit)
        return cb

    def _stopped(self, pid: int) -> None:
        if self.journal is not None:
            self.journal.server_stopped(pid)


def measured(call: EvalCall, m: Measurement, startup: float | None,
             env: dict[str, object]) -> Evaluation:
    """A measured commit's evaluation."""
    assert call.artifact is not None
    return Evaluation(commit=call.commit, status=EvalStatus.MEASURED, measurement=m,
                      artifact=call.artifact.identity, startup_s=startup, environment=env)


def failure_kind(err: RecoverableError) -> FailureKind:
    """The typed failure of a recoverable error while measuring (what the crash rule reads)."""
    if isinstance(err, ServeError):
        return FailureKind.SERVE
    if isinstance(err, ProbeError):
        return FailureKind.PROBE
    if isinstance(err, WrongModel):
        return FailureKind.WRONG_MODEL
    return FailureKind.OTHER


@contextlib.contextmanager
def _stop_on(cancel: threading.Event | None, handle: ServerHandle) -> Iterator[None]:
    """While probing, a set ``cancel`` stops the server, which ends the probe's requests."""
    if cancel is None or handle.stop is None:
        yield
        return
    done = threading.Event()
    stop = handle.stop

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(0.1):
                if not done.is_set():
                    stop()
                return

    t = threading.Thread(target=watch, name="cancel-watch", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()
