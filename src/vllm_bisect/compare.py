"""A/B at one commit: two serve configurations on the same GPU, interleaved, paired.

Both servers run at once (their start-ups serialized by the runtime's per-GPU lock). Probe
runs alternate in a randomized balanced order (each pair is AB or BA, chosen at random, so
drift hits both sides alike); a pair where either side fails is discarded. The gain is the
mean over pairs of b/a - 1 of decode tok/s (1000 / per-token ITL), with a 95% t-interval over
pairs (as in vLLM's GDN report: "+28.91% (95% CI +25.78% to +32.12%)"); greedy outputs are
compared by the digests of the generated text.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from vllm_bisect.bisect.measurement.executor import Slot
from vllm_bisect.bisect.wiring import open_session
from vllm_bisect.builders.base import ArtifactKind, Builder
from vllm_bisect.errors import FatalError, RecoverableError
from vllm_bisect.models import Measurement
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.runtime.launch import ProcessLauncher, ServerSpec
from vllm_bisect.spec import BisectSpec, ServeSpec


@dataclass(frozen=True)
class Variant:
    name: str
    env: dict[str, str]
    args: list[str]
    speculative: bool = True

    def serve_spec(self, base: ServeSpec) -> ServeSpec:
        return base.model_copy(update={
            "env": {**base.env, **self.env}, "args": [*base.args, *self.args],
            "speculative": base.speculative if self.speculative else None})


@dataclass(frozen=True)
class CompareResult:
    a_mean: float
    b_mean: float
    gain: float
    ci_low: float
    ci_high: float
    pairs: int
    discarded: int
    identical_outputs: bool
    a_samples: list[float]
    b_samples: list[float]

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def describe(self) -> str:
        return (f"B vs A decode tok/s: {self.gain:+.2%} (95% CI {self.ci_low:+.2%} to "
                f"{self.ci_high:+.2%}) over {self.pairs} pairs; A {self.a_mean:.1f}, B "
                f"{self.b_mean:.1f} tok/s; greedy outputs "
                f"{'identical' if self.identical_outputs else 'DIFFER'}")


def tok_s(m: Measurement) -> float:
    return 1000.0 / m.itl_ms if m.itl_ms else 0.0


def paired_gain(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean of b/a - 1 over pairs, with a 95% t-interval."""
    gains = [bb / aa - 1.0 for aa, bb in zip(a, b, strict=True) if aa > 0]
    mean = statistics.fmean(gains)
    if len(gains) < 2:
        return mean, math.nan, math.nan
    from scipy import stats  # here, not at import (scipy.stats is slow to load)

    half = stats.t.ppf(0.975, len(gains) - 1) * statistics.stdev(gains) / math.sqrt(len(gains))
    return mean, mean - half, mean + half


def compare(spec: BisectSpec, repo: git.Repo, commit: str, a: Variant, b: Variant,
            pairs: int, cache_dir: Path, log_dir: Path, seed: int | None = None,
            say: Callable[[str], None] | None = None) -> CompareResult:
    """``commit`` built from ``repo`` (artifacts cached under ``cache_dir``); ``say``:
    progress, a line a step (preparing, each server, each pair): no long silence."""
    tell = say or (lambda _line: None)
    # (its two servers start side by side from the artifact of the session's builder)
    with open_session(spec, cache_dir, logs=log_dir, repo=repo, slots=[Slot(0)]) as session:
        return _compare(spec, session.builder, commit, a, b, pairs, log_dir, seed, tell)


def _compare(spec: BisectSpec, builder: Builder, commit: str, a: Variant, b: Variant,
             pairs: int, log_dir: Path, seed: int | None, tell: Callable[[str], None]
             ) -> CompareResult:
    tell(f"{commit[:12]}: preparing artifact")
    artifact = builder.prepare(commit)
    if artifact.kind in (ArtifactKind.URL, ArtifactKind.IMAGE):
        raise FatalError("compare runs two servers from one artifact: use a wheel, source or "
                         "command build", hint="set build.kind accordingly")
    probe = DecodeProbe(spec.probe, spec.min_output_tokens(),
                        ops=spec.ops)
    rnd = random.Random(seed)
    with contextlib.ExitStack() as stack:
        handles = {}
        for v in (a, b):
            tell(f"{commit[:12]}: starting server {v.name}")
            handles[v.name] = stack.enter_context(ProcessLauncher().serve(artifact, ServerSpec(
                v.serve_spec(spec.serve), log_dir / f"compare-{v.name}-{commit[:12]}.log",
                timeout_s=spec.ops.startup_timeout_s,
                serialize_startup=spec.ops.serialize_startup)))
        tell("warming both servers up")
        for v in (a, b):  # warm both before any counted pair
            with contextlib.suppress(RecoverableError):
                probe.measure(handles[v.name], requests=1)
        a_s: list[float] = []
        b_s: list[float] = []
        digests: dict[str, set[str]] = {a.name: set(), b.name: set()}
        discarded = 0
        for n in range(1, pairs + 1):
            order = [a, b] if rnd.random() < 0.5 else [b, a]
            tell(f"pair {n} of {pairs} ({order[0].name} then {order[1].name})")
            got: dict[str, Measurement] = {}
            for v in order:
                try:
                    got[v.name] = probe.measure(handles[v.name], warmup=0)
                except RecoverableError:
                    break
            if len(got) < 2:
                discarded += 1
                continue
            a_s.append(tok_s(got[a.name]))
            b_s.append(tok_s(got[b.name]))
            for name, m in got.items():
                digests[name].update(r.text_sha256 for r in m.requests if r.text_sha256)
    if not a_s:
        raise FatalError(f"every one of {pairs} pairs failed", hint="see the compare logs")
    gain, lo, hi = paired_gain(a_s, b_s)
    identical = digests[a.name] == digests[b.name] and len(digests[a.name]) == 1
    return CompareResult(statistics.fmean(a_s), statistics.fmean(b_s), gain, lo, hi, len(a_s),
                         discarded, identical, a_s, b_s)
