"""Serve one commit with vLLM's torch profiler on and run the session's probe between
``POST /start_profile`` and ``POST /stop_profile``.

:func:`profiled_run` is the only place ``explain`` starts a server: it opens a session
(:func:`~vllm_bisect.bisect.wiring.open_session`, the bisect's own evaluator: artifact, launch
plan, teardown, logs) with the profiler's flags and environment added to ``serve`` and its
probe steps passed in. Re-point this one function when the runtime's launcher
seam changes.

Which switch a commit takes (vLLM's source, ``vllm/config/profiler.py`` and
``entrypoints/serve/profile/api_router.py``): where the commit has ``ProfilerConfig``,
``--profiler-config '{"profiler": "torch", "torch_profiler_dir": DIR}'`` (DIR absolute);
before it, the ``VLLM_TORCH_PROFILER_DIR=DIR`` environment variable. The two routes exist
only when a profiler is configured, and answer 200.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import git
import httpx

from vllm_bisect import net
from vllm_bisect.bisect.bench import first_slot
from vllm_bisect.bisect.measurement.evaluate import PhaseCallback
from vllm_bisect.bisect.measurement.probe_steps import EvalCall, ProbeStep, server_steps
from vllm_bisect.bisect.wiring import open_session
from vllm_bisect.builders import Builder
from vllm_bisect.errors import ProbeError
from vllm_bisect.models import Evaluation, Measurement
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import BisectSpec, ProbeSpec

# where vLLM's ProfilerConfig lives (the later layout keeps the first as a compat shim)
PROFILER_CONFIG_FILES = ("vllm/config/profiler.py", "vllm/foundation/config/profiler.py")
# the total time of one /stop_profile, headers and body (a drip cannot stretch it): vLLM
# flushes (and gzips) the trace before it answers
STOP_TIMEOUT_S = 1800.0
START_TIMEOUT_S = 120.0
ERROR_BODY_BYTES = 4096  # of an error's body, what is read (a 1 GiB body is not read whole)


@dataclass(frozen=True)
class ProfilerSwitch:
    """How one server gets the profiler: extra ``vllm serve`` args and env."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return " ".join([*(f"{k}={v}" for k, v in self.env.items()), *self.args])


# ProfilerConfig fields that make a profile cheaper, each sent only where the commit's
# ProfilerConfig declares it (vLLM's configs forbid unknown keys: the server would exit).
# With the defaults /stop_profile takes minutes: it builds the key-averages table over every
# event and writes the API server's own trace as well (measured: docs/design-notes.md).
CHEAPER: dict[str, object] = {
    "torch_profiler_with_stack": False,            # no Python stacks per op
    "torch_profiler_dump_cuda_time_total": False,  # no key-averages table at stop
    "ignore_frontend": True,                       # no trace of the API server process
    "torch_profiler_use_gzip": False,              # no gzip pass over the trace at stop
}
FIELD_RE = re.compile(r"^    ([a-z_][a-z0-9_]*)\s*:", re.MULTILINE)


def profiler_switch(repo: git.Repo | None, commit: str, trace_dir: Path) -> ProfilerSwitch:
    """The flag where the commit's source has ``ProfilerConfig``, else the env variable
    (also when the source cannot be read: older vLLM ignores an unknown variable, but
    exits on an unknown flag). The flag carries the :data:`CHEAPER` fields the commit's
    ``ProfilerConfig`` declares."""
    directory = str(trace_dir.absolute())
    source = _profiler_source(repo, commit) if repo is not None else None
    if source is not None:
        declared = set(FIELD_RE.findall(source))
        cfg: dict[str, object] = {"profiler": "torch", "torch_profiler_dir": directory}
        cfg.update({k: v for k, v in CHEAPER.items() if k in declared})
        return ProfilerSwitch(args=["--profiler-config", json.dumps(cfg)])
    return ProfilerSwitch(env={"VLLM_TORCH_PROFILER_DIR": directory})


def _profiler_source(repo: git.Repo, commit: str) -> str | None:
    """The text of the commit's ``ProfilerConfig`` module (the later layout's compat shim
    only re-exports: the first file that declares fields wins), or None without one."""
    found: str | None = None
    for path in PROFILER_CONFIG_FILES:
        try:
            text = str(repo.git.show(f"{commit}:{path}"))
        except git.GitCommandError:
            continue
        if FIELD_RE.search(text):
            return text
        found = found if found is not None else text
    return found


class Profiled:
    """The probe's steps between start and stop of the profiler, after ``warm`` (the
    probe's warm-up requests, run before ``/start_profile``: on real vLLM 0.25.1 a warm-up
    inside the window added 32-token requests and first-use costs to the steps profiled,
    docs/validation.md (l))."""

    def __init__(self, inner: list[ProbeStep], warm: Callable[[ServerHandle], None] | None
                 = None) -> None:
        self.inner = inner
        self.warm = warm

    @staticmethod
    def _post(server: ServerHandle, route: str, deadline_s: float) -> None:
        """POST ``route``, all of it (headers and body, however they drip) within
        ``deadline_s``; of an error's body only the first ``ERROR_BODY_BYTES`` are read."""
        url = server.url.rstrip("/") + route
        try:
            with net.client(timeout=httpx.Timeout(30.0, read=deadline_s)) as http, \
                    net.stream(http, "POST", url, deadline_s=deadline_s) as (r, dog):
                status, body = r.status_code, bytearray()
                if status != 200:
                    for piece in net.iter_bytes(r, dog):
                        body += piece
                        if len(body) >= ERROR_BODY_BYTES:
                            break
        except net.DeadlineExceeded:
            raise ProbeError(f"POST {route} did not answer within {deadline_s:.0f} s",
                             hint="the server hangs or drips its answer; see its log") from None
        except (httpx.HTTPError, net.NetLimitError) as err:
            raise ProbeError(f"POST {route}: {err}") from None
        if status == 404:
            raise ProbeError(f"POST {route} answered 404: the server runs without a profiler",
                             hint="the server ignored the profiler switch (see its log)")
        if status != 200:
            text = bytes(body[:200]).decode(errors="replace")
            raise ProbeError(f"POST {route} answered {status}: {text}")

    def run(self, call: EvalCall, server: ServerHandle, m: Measurement | None) -> Measurement:
        if self.warm is not None:
            call.say("warm-up before the profiler")
            self.warm(server)
        call.say("profiler on (POST /start_profile)")
        self._post(server, "/start_profile", START_TIMEOUT_S)
        try:
            for step in self.inner:
                m = step.run(call, server, m)
        except BaseException:
            with contextlib.suppress(ProbeError):  # the probe's own error is the one to tell
                self._post(server, "/stop_profile", STOP_TIMEOUT_S)
            raise
        call.say("profiler off (POST /stop_profile), writing the trace")
        self._post(server, "/stop_profile", STOP_TIMEOUT_S)
        assert m is not None
        return m


def profiled_probe(spec: BisectSpec) -> ProbeSpec:
    """The probe a profiled server runs: the session's, with at most
    ``explain.profile_requests`` requests of at most ``explain.profile_max_tokens`` tokens
    (the diff is per decode step, so a short window reads the same kernels; vLLM's stop
    time grows with the events recorded), with no warm-up inside the window (the probe's
    ``warm_up`` runs before ``/start_profile``), and without the MTP speed-up's second,
    non-speculative server (the profile is of the server the probe measures)."""
    probe, ex = spec.probe, spec.explain
    update: dict[str, object] = {"mtp_speedup": None, "warmup": 0,
                                 "requests": min(probe.requests, ex.profile_requests)}
    if probe.max_tokens is not None:
        update["max_tokens"] = min(probe.max_tokens, ex.profile_max_tokens)
        if probe.min_tokens is not None:
            update["min_tokens"] = min(probe.min_tokens, ex.profile_max_tokens)
    return probe.model_copy(update=update)


def profiled_run(spec: BisectSpec, builder: Builder, commit: str, switch: ProfilerSwitch,
                 log_dir: Path, cache_dir: Path, on_phase: PhaseCallback | None = None
                 ) -> Evaluation:
    """Start one server of ``commit`` with ``switch`` and run :func:`profiled_probe` on it
    under the profiler (the session's probe steps wrapped in :class:`Profiled`, passed to
    the evaluator as its steps). ``on_phase``: each step (the artifact, the server, the
    profiler on and off), as the bisect's evaluator tells them."""
    serve = spec.serve.model_copy(update={"args": [*spec.serve.args, *switch.args],
                                          "env": {**spec.serve.env, **switch.env}})
    profiled = spec.model_copy(update={"serve": serve, "probe": profiled_probe(spec)})
    warm = DecodeProbe(spec.probe, None, ops=spec.ops).warm_up if spec.probe.warmup else None
    slots = first_slot(spec)  # the bisect's first worker's GPUs (explain runs alone)
    with open_session(profiled, cache_dir, logs=log_dir, builder=builder, on_phase=on_phase,
                      slots=slots, steps=[Profiled(server_steps(profiled), warm=warm)]) as s:
        devices = slots[0].devices if slots and slots[0].devices else None
        return s.bench.evaluator.evaluate(commit, devices=devices)
