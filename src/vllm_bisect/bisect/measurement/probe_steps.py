"""What is probed on a commit's server, as an explicit list of steps (decode, load, bench,
MTP speed-up), and the per-call context every step reads.

An :class:`EvalCall` holds everything that belongs to one evaluation (the commit, its
artifact and launch plan, the GPUs and environment it was given, where its logs go, how to
cancel it, how many more samples its policy wants). The evaluator builds one per call and
passes it down; nothing per call is kept on the evaluator, which worker threads share.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from vllm_bisect.bisect.policies.base import MoreSamples
from vllm_bisect.builders import Artifact
from vllm_bisect.errors import Cancelled
from vllm_bisect.models import LoadResult, Measurement, MtpCell, TokensSource
from vllm_bisect.probes.decode import DecodeProbe, combine
from vllm_bisect.probes.load import measure_grid
from vllm_bisect.probes.vllm_bench import bench_serve
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.gpustate import observe, process_tree, read_state
from vllm_bisect.runtime.process import LaunchPlan
from vllm_bisect.spec import BenchSpec, BisectSpec, LoadSpec, OpsSpec, ProbeSpec
from vllm_bisect.text import plural

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalCall:
    """One evaluation's own state (see the module docstring)."""

    commit: str
    log_dir: Path
    more: MoreSamples | None = None
    devices: tuple[int, ...] | None = None
    cancel: threading.Event | None = None
    phase: Callable[[str, str], None] = lambda commit, phase: None
    artifact: Artifact | None = None
    plan: LaunchPlan | None = None
    env: dict[str, str] = field(default_factory=dict)  # what pinning adds (CUDA_VISIBLE_DEVICES)
    pass_env: tuple[str, ...] = ()  # serve.pass_env: credentials the operator opted into

    def say(self, phase: str) -> None:
        self.phase(self.commit, phase)

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    @property
    def vllm(self) -> str:
        """The artifact's ``vllm`` (its venv's, else the one on PATH)."""
        venv = self.artifact.venv if self.artifact is not None else None
        return str(venv / "bin" / "vllm") if venv else "vllm"

    @property
    def bench_env(self) -> dict[str, str]:
        """``vllm bench``'s environment: the server's (an allowlist, ``runtime.childenv``),
        with this call's GPUs."""
        plan_env = (self.plan.env or {}) if self.plan is not None else {}
        return child_env({**plan_env, **self.env}, pass_env=self.pass_env)

    def log(self, kind: str) -> Path:
        return self.log_dir / f"{kind}-{self.commit[:12]}.log"


class ProbeStep(Protocol):
    """One step on a running server; ``m`` is what the steps before it measured."""

    def run(self, call: EvalCall, server: ServerHandle, m: Measurement | None) -> Measurement: ...


class DecodeStep:
    """The decode probe, then more requests on the same server while the policy asks."""

    def __init__(self, probe: ProbeSpec, min_output_tokens: int | None, ops: OpsSpec) -> None:
        self.probe = DecodeProbe(probe, min_output_tokens, ops=ops)

    def run(self, call: EvalCall, server: ServerHandle, m: Measurement | None) -> Measurement:
        before = read_state()
        m = self.probe.measure(server)
        while call.more is not None and (k := call.more(m)) > 0:
            if call.cancelled():
                raise Cancelled("cancelled between samples")
            call.say(f"sampling {plural(k, 'more request')} ({len(m.requests)} so far)")
            m = combine(m, self.probe.measure(server, requests=k, warmup=0))
        after = read_state()
        own = process_tree(server.pid) if before or after else set()
        record, note = observe(before, after, own)
        if record is not None:  # the GPUs' state around the samples (another tenant?)
            m = m.model_copy(update={"gpu_state": record, "gpu_contended": note is not None,
                                     "notes": [*m.notes, note] if note else m.notes})
            if note:
                logger.warning("%s: %s", call.commit[:12], note)
        return m


class LoadStep:
    """Concurrent load over its (concurrency, context) grid. ``into``: "load" (the cells in
    ``load_cells``, the first in ``load``) or "mtp_on" (the MTP speed-up's arm with
    speculative decoding: ``mtp_cells``, paired with the plain arm later)."""

    def __init__(self, probe: ProbeSpec, load: LoadSpec, into: str, what: str,
                 ops: OpsSpec) -> None:
        self.probe = probe
        self.ops = ops
        self.load = load
        self.into = into
        self.what = what

    def run(self, call: EvalCall, server: ServerHandle, m: Measurement | None) -> Measurement:
        call.say(self.what)
        cells = measure_grid(self.probe, self.load, server, ops=self.ops, say=call.say)
        if m is None:  # the load alone (the MTP speed-up's plain server)
            m = Measurement(endpoint="completions", model=server.model, requested_tokens=None,
                            min_output_tokens=None, output_tokens=[], length_ok=True,
                            itl_ms=None, chunk_itl_ms=None, tokens_per_chunk=None,
                            ttft_ms=None, tpot_ms=cells[0].tpot_ms, finish_reasons=[],
                            tokens_source=TokensSource.USAGE,
                            wall_s=sum(c.duration_s for c in cells))
        if self.into == "mtp_on":
            return m.model_copy(update={"mtp_on": cells[0], "mtp_cells": [
                MtpCell(concurrency=r.concurrency, context_tokens=r.context_tokens, on=r)
                for r in cells]})
        return m.model_copy(update={"load": cells[0], "load_cells": cells})


class BenchServeStep:
    """``vllm bench serve`` against the server, with the artifact's vllm and this call's env."""

    def __init__(self, bench: BenchSpec, model: str, timeout_s: float) -> None:
        self.bench = bench
        self.timeout_s = timeout_s
        self.model = model

    def run(self, call: EvalCall, server: ServerHandle, m: Measurement | None) -> Measurement:
        assert m is not None
        call.say("vllm bench serve")
        return m.model_copy(update={"bench": bench_serve(
            call.vllm, server.url, self.model, self.bench.args, log=call.log("bench"),
            env=call.bench_env, timeout_s=self.timeout_s)})


def server_steps(spec: BisectSpec) -> list[ProbeStep]:
    """The steps on a commit's server, in order."""
    p = spec.probe
    steps: list[ProbeStep] = [DecodeStep(p, spec.min_output_tokens(), spec.ops)]
    if p.load is not None:
        steps.append(LoadStep(p, p.load, "load", f"load: {p.load.requests} requests at "
                                                 f"concurrency {p.load.concurrency}, "
                                                 f"context {p.load.context}", spec.ops))
    if p.bench is not None and p.bench.kind == "serve":
        steps.append(BenchServeStep(p.bench, spec.serve.model, spec.ops.bench_timeout_s))
    if p.mtp_speedup is not None:
        steps.append(LoadStep(p, p.mtp_speedup, "mtp_on",
                              "MTP speed-up: the load with speculative decoding", spec.ops))
    if spec.verdict.symptom.info.startup_memory:
        from vllm_bisect.bisect.memory_step import MemoryStep

        steps.append(MemoryStep())
    return steps


def plain_steps(spec: BisectSpec) -> list[ProbeStep]:
    """The MTP speed-up's other arm: the same load on a server without speculation."""
    p = spec.probe
    assert p.mtp_speedup is not None
    return [LoadStep(p, p.mtp_speedup, "load", "MTP speed-up: the load without speculation",
                     spec.ops)]


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
