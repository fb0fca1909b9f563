"""Measure one commit: prepare its artifact, serve it, probe it, always tear down.

Every recoverable failure becomes an :class:`Evaluation` that is not MEASURED (a skip);
fatal errors propagate.
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

from vllm_bisect.bisect.journal import SessionJournal
from vllm_bisect.builders import Artifact, ArtifactKind, Builder
from vllm_bisect.builders.base import prepare
from vllm_bisect.envinfo import fingerprint
from vllm_bisect.errors import (
    ArtifactUnavailable,
    Cancelled,
    FatalError,
    ProbeError,
    RecoverableError,
    disk_full,
)
from vllm_bisect.models import EvalStatus, Evaluation, LoadResult, Measurement, MtpCell, TokensSource
from vllm_bisect.probes.decode import DecodeProbe, combine
from vllm_bisect.probes.load import measure_grid
from vllm_bisect.probes.vllm_bench import bench_serve, bench_throughput
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.gpustate import observe, process_tree, read_state
from vllm_bisect.runtime.process import free_port, run_server
from vllm_bisect.spec import BisectSpec, ImageBuild, LoadSpec, OpsSpec, ProbeSpec

if TYPE_CHECKING:
    import docker

logger = logging.getLogger(__name__)

PhaseCallback = Callable[[str, str], None]  # (commit, phase)
MoreSamples = Callable[[Measurement], int]  # how many more requests to probe (0: enough)


class Evaluator:
    def __init__(self, spec: BisectSpec, builder: Builder, log_dir: Path,
                 journal: SessionJournal | None = None, session_id: str = "",
                 on_phase: PhaseCallback | None = None) -> None:
        self.spec = spec
        self.builder = builder
        self.log_dir = log_dir
        self.journal = journal
        self.session_id = session_id
        self.on_phase = on_phase
        self.probe = DecodeProbe(spec.probe, spec.min_output_tokens(),
                                 ops=spec.ops)
        self._docker: docker.DockerClient | None = None
        self._vllm = "vllm"                       # the artifact's vllm, for probe.bench
        self._bench_env: dict[str, str] | None = None

    def container_client(self) -> docker.DockerClient:
        """The docker client for the container runtime (created on first use; reaps orphans)."""
        if self._docker is None:
            from vllm_bisect.builders.image import docker_client
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

    def _sample(self, handle: ServerHandle, commit: str, more: MoreSamples | None,
                cancel: threading.Event | None = None) -> Measurement:
        p = self.spec.probe
        before = read_state()
        with _stop_on(cancel, handle):
            m = self.probe.measure(handle)
            while more is not None and (k := more(m)) > 0:
                if cancel is not None and cancel.is_set():
                    raise Cancelled("cancelled between samples")
                self._phase(commit, f"sampling {k} more requests ({len(m.requests)} so far)")
                m = combine(m, self.probe.measure(handle, requests=k, warmup=0))
            after = read_state()
            own = process_tree(handle.pid) if before or after else set()
            record, note = observe(before, after, own)
            if record is not None:
                m = m.model_copy(update={"gpu_state": record, "gpu_contended": note is not None,
                                         "notes": [*m.notes, note] if note else m.notes})
                if note:
                    logger.warning("%s: %s", commit[:12], note)
            if p.load is not None:
                self._phase(commit, f"load: {p.load.requests} requests at concurrency "
                                    f"{p.load.concurrency}, context {p.load.context}")
                cells = measure_grid(
                    p, p.load, handle, ops=self.spec.ops)
                m = m.model_copy(update={"load": cells[0], "load_cells": cells})
            if p.bench is not None and p.bench.kind == "serve":
                self._phase(commit, "vllm bench serve")
                m = m.model_copy(update={"bench": bench_serve(
                    self._vllm, handle.url, self.spec.serve.model, p.bench.args,
                    log=self.log_dir / f"bench-{commit[:12]}.log", env=self._bench_env,
                    timeout_s=self.spec.ops.bench_timeout_s)})
            if p.mtp_speedup is not None:
                self._phase(commit, "MTP speed-up: the load with speculative decoding")
                on = measure_grid(
                    p, p.mtp_speedup, handle, ops=self.spec.ops)
                m = m.model_copy(update={
                    "mtp_on": on[0], "mtp_cells": [MtpCell(concurrency=r.concurrency,
                                                           context_tokens=r.context_tokens, on=r)
                                                   for r in on]})
        return m

    def _mtp_off(self, artifact: Artifact, commit: str, m: Measurement,
                 devices: Sequence[int] | None, extra: dict[str, str],
                 cancel: threading.Event | None) -> Measurement:
        """The MTP speed-up's other arm: the same load on a server without speculation."""
        p = self.spec.probe
        assert p.mtp_speedup is not None
        plain = Evaluator(self.spec.model_copy(update={
            "serve": self.spec.serve.model_copy(update={"speculative": None}),
            "probe": p.model_copy(update={"mtp_speedup": None, "load": None, "bench": None})}),
            self.builder, self.log_dir / "no-spec", self.journal, self.session_id, self.on_phase)
        plain._docker = self._docker
        plain.probe = _LoadOnly(p, p.mtp_speedup, self.spec.ops)  # type: ignore[assignment]
        self._phase(commit, "MTP speed-up: the same load without speculative decoding")
        off, _ = plain._serve_and_probe(artifact, commit, None, devices, extra, cancel)
        assert off.load_cells and m.mtp_cells
        return with_mtp_off(m, off.load_cells)

    def evaluate(self, commit: str, more: MoreSamples | None = None, *,
                 devices: Sequence[int] | None = None,
                 cancel: threading.Event | None = None) -> Evaluation:
        """Measure one commit. ``devices``: the GPUs this evaluation may use (a parallel
        worker's share: CUDA_VISIBLE_DEVICES, or the container's device ids). ``cancel``: set
        from another thread to stop it (the server is torn down; the result is CANCELLED)."""
        extra = {} if devices is None else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))}
        env = fingerprint({**self.spec.serve.env, **extra})
        cancelled = Evaluation(commit=commit, status=EvalStatus.CANCELLED, reason="cancelled",
                               environment=env)
        if cancel is not None and cancel.is_set():
            return cancelled
        self._phase(commit, "preparing artifact")
        try:
            artifact = prepare(self.builder, commit, cancel)
        except Cancelled:
            return cancelled
        except ArtifactUnavailable as err:
            return Evaluation(commit=commit, status=EvalStatus.UNAVAILABLE, reason=err.message,
                              log_tail=err.log_tail, environment=env)
        except FatalError:
            raise
        except Exception as err:  # a bug or an unforeseen input: skip this commit only
            return self._internal(commit, "preparing its artifact", err, env, None)
        try:
            return self._measure(commit, artifact, more, devices, extra, cancel, env, cancelled)
        except FatalError:
            raise
        except Exception as err:
            return self._internal(commit, "measuring it", err, env, artifact.identity)

    def _internal(self, commit: str, doing: str, err: Exception, env: dict[str, object],
                  artifact: str | None) -> Evaluation:
        """An unexpected exception while measuring one commit: a skip with its reason (the
        traceback goes to the log), never an aborted bisect; a full disk stops the run."""
        fault = disk_full(err, f"while {doing}")
        if fault is not None:
            raise fault from None
        log = self.log_dir / f"error-{commit[:12]}.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as fh:
                fh.write("".join(traceback.format_exception(err)) + "\n")
            where = f" (log: {log})"
        except OSError:
            where = ""
        logger.warning("%s: unexpected %s while %s: %s%s", commit[:12], type(err).__name__,
                       doing, err, where)
        return Evaluation(commit=commit, status=EvalStatus.FAILED, artifact=artifact,
                          reason=f"internal error while {doing} ({type(err).__name__}: "
                                 f"{str(err)[:300]}){where}", environment=env)

    def _measure(self, commit: str, artifact: Artifact, more: MoreSamples | None,
                 devices: Sequence[int] | None, extra: dict[str, str],
                 cancel: threading.Event | None, env: dict[str, object],
                 cancelled: Evaluation) -> Evaluation:
        try:
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled after the artifact was ready")
            m, startup = self._serve_and_probe(artifact, commit, more, devices, extra, cancel)
            if self.spec.probe.mtp_speedup is not None and self.spec.serve.speculative is not None:
                m = self._mtp_off(artifact, commit, m, devices, extra, cancel)
            bench = self.spec.probe.bench
            if bench is not None and bench.kind == "throughput":
                if artifact.kind is ArtifactKind.IMAGE or artifact.kind is ArtifactKind.URL:
                    raise ProbeError("vllm bench throughput runs only with a local vllm "
                                     f"(not a {artifact.kind.value} artifact)",
                                     hint='use probe.bench.kind = "serve"')
                self._phase(commit, "vllm bench throughput (offline)")
                m = m.model_copy(update={"bench": bench_throughput(
                    self._vllm, self.spec.serve.model, bench.args,
                    log=self.log_dir / f"bench-{commit[:12]}.log", env=self._bench_env,
                    timeout_s=self.spec.ops.bench_timeout_s)})
        except RecoverableError as err:
            if isinstance(err, Cancelled) or (cancel is not None and cancel.is_set()):
                return cancelled.model_copy(update={"artifact": artifact.identity})
            where = f" (log: {err.hint.partition('log: ')[2]})" if "log: " in err.hint else ""
            return Evaluation(commit=commit, status=EvalStatus.FAILED,
                              reason=f"{type(err).__name__}: {err.message}{where}",
                              log_tail=err.log_tail, artifact=artifact.identity, environment=env)
        return Evaluation(commit=commit, status=EvalStatus.MEASURED, measurement=m,
                          artifact=artifact.identity, startup_s=startup, environment=env)

    def _serve_and_probe(self, artifact: Artifact, commit: str, more: MoreSamples | None,
                         devices: Sequence[int] | None, extra: dict[str, str],
                         cancel: threading.Event | None) -> tuple[Measurement, float | None]:
        plan = artifact.launch_plan(self.spec.serve, port := free_port())
        log = self.log_dir / f"serve-{commit[:12]}.log"
        self._vllm = str(artifact.venv / "bin" / "vllm") if artifact.venv else "vllm"
        self._bench_env = child_env({**((plan.env or {}) if plan else {}), **extra},
                                    pass_env=self.spec.serve.pass_env)
        if artifact.kind is ArtifactKind.IMAGE:
            from vllm_bisect.runtime.container import run_container

            assert isinstance(self.spec.build, ImageBuild)
            build = self.spec.build if devices is None else self.spec.build.model_copy(
                update={"gpus": list(devices)})
            self._phase(commit, f"starting container {artifact.image}")
            with run_container(self.container_client(), artifact, self.spec.serve, build,
                               port=port, log_path=log, session_id=self.session_id,
                               timeout_s=self.spec.ops.startup_timeout_s,
                               hf_cache=self.spec.ops.hf_cache,
                               serialize_startup=self.spec.ops.serialize_startup,
                               cancel=cancel) as h:
                self._phase(commit, f"probing ({h.startup_s:.1f} s to healthy)")
                return self._sample(h, commit, more, cancel), h.startup_s
        if plan is None:
            assert artifact.url is not None
            self._phase(commit, "probing")
            handle = ServerHandle(url=artifact.url, model=self.spec.serve.model)
            return self._sample(handle, commit, more, cancel), None
        plan = dataclasses.replace(
            plan, env={**(plan.env or {}), **extra, "VLLM_BISECT_SESSION": self.session_id})
        self._phase(commit, "starting server")
        with run_server(plan, url=f"http://127.0.0.1:{port}", model=self.spec.serve.model,
                        log_path=log, timeout_s=self.spec.ops.startup_timeout_s,
                        on_start=self._started(commit), on_stop=self._stopped,
                        serialize_startup=self.spec.ops.serialize_startup, cancel=cancel) as h:
            self._phase(commit, f"probing ({h.startup_s:.1f} s to healthy)")
            return self._sample(h, commit, more, cancel), h.startup_s

    def _started(self, commit: str) -> Callable[[int], None]:
        def cb(pid: int) -> None:
            if self.journal is not None:
                self.journal.server_started(pid, commit)
        return cb

    def _stopped(self, pid: int) -> None:
        if self.journal is not None:
            self.journal.server_stopped(pid)


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


def with_mtp_off(m: Measurement, off: list[LoadResult]) -> Measurement:
    """Pair each MTP-on cell with its MTP-off cell; the verdict's speed-up (``mtp_speedup``,
    ``mtp_on``, ``mtp_off``) is the worst cell's."""
    cells = [c.model_copy(update={"off": o, "speedup": c.on.output_tok_s / o.output_tok_s
                                  if o.output_tok_s else None})
             for c, o in zip(m.mtp_cells, off, strict=True)]
    rated = [c for c in cells if c.speedup is not None]
    worst = min(rated, key=lambda c: c.speedup or 0.0) if rated else cells[0]
    return m.model_copy(update={"mtp_cells": cells, "mtp_on": worst.on, "mtp_off": worst.off,
                                "mtp_speedup": worst.speedup})


class _LoadOnly:
    """Stands in for the decode probe on the MTP speed-up's plain server: it runs the load
    only, and hands it back in a measurement."""

    def __init__(self, probe: ProbeSpec, load: LoadSpec, ops: OpsSpec) -> None:
        self.probe = probe
        self.load = load
        self.ops = ops

    def measure(self, server: ServerHandle, requests: int | None = None,
                warmup: int | None = None) -> Measurement:
        cells = measure_grid(self.probe, self.load, server,
                             ops=self.ops)
        res = cells[0]
        return Measurement(endpoint="completions", model=server.model, requested_tokens=None,
                           min_output_tokens=None, output_tokens=[], length_ok=True, itl_ms=None,
                           chunk_itl_ms=None, tokens_per_chunk=None, ttft_ms=None,
                           tpot_ms=res.tpot_ms, finish_reasons=[],
                           tokens_source=TokensSource.USAGE, load=res, load_cells=cells,
                           wall_s=sum(c.duration_s for c in cells))
