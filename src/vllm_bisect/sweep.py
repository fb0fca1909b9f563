"""MTP speed-up over a concurrency x context grid at one commit (the MTP benchmark post's table).

The post (Qwen3.6-27B, vLLM 0.25.1) found MTP's gain depends on concurrency (+82% alone, -22..-37%
at 12-16 concurrent requests) and on context (-20..-44% at 32k-60k), with acceptance steady at
~71-73%. ``run_sweep`` measures that table for one commit: the same closed-loop load per
(concurrency, context) cell on a server with the spec's speculative decoding and on a second
server without it (the evaluator's ``probe.mtp_speedup`` path, so a bisect with
``symptom = "mtp-speedup"`` and the same grid follows exactly these numbers: its verdict uses
the worst cell). Rows: output tok/s off and on, change %, acceptance rate
(accepted / drafted tokens) and acceptance length (1 + accepted / drafts) from each cell's own
/metrics deltas, and the server-counted prompt tokens.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import git

from vllm_bisect.bisect.measurement.evaluate import PhaseCallback
from vllm_bisect.bisect.measurement.executor import Slot
from vllm_bisect.bisect.wiring import open_session
from vllm_bisect.errors import FatalError, ProbeError
from vllm_bisect.models import EvalStatus, Measurement
from vllm_bisect.spec import BisectSpec, LoadSpec


@dataclass(frozen=True)
class SweepRow:
    concurrency: int
    context_tokens: int | None
    prompt_tokens: int | None
    off_tok_s: float | None
    on_tok_s: float
    change_pct: float | None
    acceptance_rate: float | None      # accepted / drafted tokens, 0..1
    acceptance_length: float | None    # 1 + accepted / drafts
    on_tpot_ms: float | None
    off_tpot_ms: float | None


@dataclass(frozen=True)
class SweepResult:
    commit: str
    speculative: dict[str, Any]
    rows: list[SweepRow]
    measurement: Measurement

    def to_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "speculative": self.speculative,
                "rows": [asdict(r) for r in self.rows],
                "measurement": self.measurement.model_dump(mode="json")}

    def markdown(self) -> str:
        k = self.speculative.get("num_speculative_tokens")
        head = (f"MTP sweep at {self.commit[:12]} ({self.speculative.get('method')}, K={k}); "
                "output tok/s of the whole server, closed loop\n\n"
                "| concurrency | context (tokens) | MTP off tok/s | MTP on tok/s | change | "
                "acceptance | acceptance length |\n|---|---|---|---|---|---|---|\n")
        lines = []
        for r in self.rows:
            ctx = str(r.prompt_tokens if r.prompt_tokens is not None else r.context_tokens or "-")
            lines.append(
                f"| {r.concurrency} | {ctx} | {_f(r.off_tok_s)} | {r.on_tok_s:.1f} | "
                f"{'-' if r.change_pct is None else f'{r.change_pct:+.1f}%'} | "
                f"{'-' if r.acceptance_rate is None else f'{100 * r.acceptance_rate:.1f}%'} | "
                f"{_f(r.acceptance_length, 2)} |")
        return head + "\n".join(lines) + "\n"


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def sweep_spec(spec: BisectSpec, concurrency: list[int] | None = None,
               context: list[int] | None = None, requests: int | None = None,
               max_tokens: int | None = None) -> BisectSpec:
    """The spec with probe.mtp_speedup set to the grid (CLI values override the spec's)."""
    if spec.serve.speculative is None:
        raise FatalError("sweep compares MTP on and off: the spec has no serve.speculative",
                         hint='add serve.speculative = { method = "mtp", '
                              'num_speculative_tokens = 3 }')
    base = spec.probe.mtp_speedup or spec.probe.load or LoadSpec(concurrency=[1, 4, 12])
    update: dict[str, Any] = {}
    if concurrency:
        update["concurrency"] = concurrency
    if context:
        update["context"] = context
    if requests is not None:
        update["requests"] = requests
    if max_tokens is not None:
        update["max_tokens"] = max_tokens
    grid = LoadSpec.model_validate({**base.model_dump(), **update})
    probe = spec.probe.model_copy(update={"mtp_speedup": grid, "load": None, "bench": None,
                                          "requests": 1})
    return spec.model_copy(update={"probe": probe})


def rows_of(m: Measurement, k: int) -> list[SweepRow]:
    rows = []
    for c in m.mtp_cells:
        off = c.off.output_tok_s if c.off is not None else None
        al = c.on.acceptance_length
        rows.append(SweepRow(
            concurrency=c.concurrency, context_tokens=c.context_tokens,
            prompt_tokens=c.on.prompt_tokens, off_tok_s=off, on_tok_s=c.on.output_tok_s,
            change_pct=(c.on.output_tok_s / off - 1.0) * 100.0 if off else None,
            acceptance_rate=(al - 1.0) / k if al is not None and k else None,
            acceptance_length=al, on_tpot_ms=c.on.tpot_ms,
            off_tpot_ms=c.off.tpot_ms if c.off is not None else None))
    return rows


def run_sweep(spec: BisectSpec, repo: git.Repo, commit: str, cache_dir: Path, log_dir: Path,
              on_phase: PhaseCallback | None = None) -> SweepResult:
    """Serve ``commit`` (built from ``repo``, artifacts cached under ``cache_dir``) with and
    without speculative decoding and measure every cell."""
    if spec.probe.mtp_speedup is None or spec.serve.speculative is None:
        raise FatalError("run_sweep needs probe.mtp_speedup and serve.speculative",
                         hint="build the spec with sweep_spec()")
    # one commit, not pinned (one slot of no GPUs, as it always measured)
    with open_session(spec, cache_dir, logs=log_dir, repo=repo, on_phase=on_phase,
                      slots=[Slot(0)]) as session:
        ev = session.bench.evaluator.evaluate(commit)
    if ev.status is not EvalStatus.MEASURED or ev.measurement is None:
        raise ProbeError(f"sweep at {commit[:12]}: {ev.status.value}: {ev.reason}",
                         hint=f"see the server logs in {log_dir}", log_tail=ev.log_tail or "")
    spec_cfg = spec.serve.speculative.model_dump()
    return SweepResult(commit, spec_cfg, rows_of(ev.measurement,
                                                 int(spec_cfg["num_speculative_tokens"])),
                       ev.measurement)


def write_report(result: SweepResult, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "sweep.md", out_dir / "sweep.json"
    md.write_text(result.markdown())
    js.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    return md, js
