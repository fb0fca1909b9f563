"""The interleaved peer check (issue 16 after session 4): ``paired_peer_check`` on synthetic
drifting blocks and on real vLLM 0.25.1 files, and scripts/gpu_mtp_run.py's
``peer_interleaved`` stage end to end against the simulator's ``vllm serve`` and
``vllm bench serve``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_bisect.errors import ProbeError
from vllm_bisect.probes.peer import (
    PeerBlock,
    PeerSide,
    abba_order,
    bench_block,
    paired_peer_check,
)

ROOT = Path(__file__).parents[2]
MTP = ROOT / "tests" / "fixtures" / "vllm-0.25.1-mtp"


def drifting(pairs: int, slope: float, probe_offset: float = 0.0) -> list[PeerBlock]:
    """Blocks in ABBA order on a server whose per-token time grows linearly, block by block
    (10 ms x (1 + slope x i)); the probe reads ``probe_offset`` above the truth."""
    out = []
    for i, side in enumerate(abba_order(pairs)):
        true = 10.0 * (1.0 + slope * i)
        out.append(PeerBlock(side, true * (1.0 + probe_offset) if side is PeerSide.PROBE
                             else true))
    return out


def test_abba_order() -> None:
    b, p = PeerSide.BENCH, PeerSide.PROBE
    assert abba_order(3) == [b, p, p, b, b, p]


def test_pairing_removes_a_linear_drift_that_the_one_shot_check_does_not() -> None:
    # both tools measure identically; the server slows by 5% per block
    r = paired_peer_check(drifting(6, 0.05))
    assert r.first_pair_diff == pytest.approx(0.05)       # one shot: bench, then the probe
    assert r.n_pairs == 6 and r.balanced
    assert abs(r.mean_diff) < 0.005                       # pairs cancel the drift ...
    assert r.pooled_diff == pytest.approx(0.0, abs=1e-12)  # ... exactly, pooled over ABBA
    assert r.agrees(0.03)
    # the interval is over ABBA quads, each drift-free: here exactly 0
    assert r.ci_basis == "quads" and len(r.quad_diffs) == 3
    assert r.ci_low == pytest.approx(0.0, abs=1e-12) and r.ci_high == pytest.approx(0.0, abs=1e-12)
    # the pair differences alternate in sign: the drift is there, and the pairs see it
    assert all((d > 0) == first for d, first in zip(r.pair_diffs, r.bench_first, strict=True))


def test_pairing_keeps_a_real_difference() -> None:
    r = paired_peer_check(drifting(6, 0.05, probe_offset=0.04))
    assert r.mean_diff == pytest.approx(0.04, abs=0.005)
    assert r.pooled_diff == pytest.approx(0.04, abs=1e-9)
    assert not r.agrees(0.03)
    assert r.ci_low is not None and r.ci_low > 0.03
    steady = paired_peer_check(drifting(4, 0.0, probe_offset=0.01))
    assert steady.median_diff == pytest.approx(0.01) and steady.agrees(0.03)


def test_unbalanced_and_malformed_blocks() -> None:
    r = paired_peer_check(drifting(3, 0.05))
    assert not r.balanced                                  # 2 bench-first pairs, 1 probe-first
    assert r.mean_diff > 0.01                              # and the drift shows
    assert r.ci_basis == "pairs" and len(r.quad_diffs) == 1
    one = paired_peer_check(drifting(1, 0.0))
    assert one.n_pairs == 1 and one.ci_low is None and one.ci_basis == "none"
    with pytest.raises(ProbeError, match="even number"):
        paired_peer_check(drifting(2, 0.0)[:3])
    two_bench = [PeerBlock(PeerSide.BENCH, 1.0), PeerBlock(PeerSide.BENCH, 1.0)]
    with pytest.raises(ProbeError, match="bench, bench"):
        paired_peer_check(two_bench)


def test_bench_block_from_real_detailed_file() -> None:
    """Per-request TPOT from vLLM 0.25.1's --save-detailed itls gives its own mean TPOT."""
    doc = json.loads((MTP / "bench_serve_mtp_same_prompt_c4_run2.json").read_text())
    b = bench_block(doc)
    assert b.side is PeerSide.BENCH and len(b.per_request_ms) == 24
    assert b.mean_ms == doc["mean_tpot_ms"]
    assert sum(b.per_request_ms) / 24 == pytest.approx(doc["mean_tpot_ms"], rel=1e-6)


@pytest.mark.exclusive_cpu   # bench's and the probe's timings must agree: no test beside it
def test_peer_interleaved_stage_on_the_simulator(tmp_path: Path) -> None:
    """The stage as the GPU session runs it, with the simulator behind --vllm: bench and probe
    blocks alternate on one server; the simulator has no drift, so the pairs agree."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "VLLM_SIM_PROMPT_SEEDED": "1",
           "VLLM_SIM_ACCEPTANCE": "0.7", "VLLM_SIM_SPEC_STEP_MS": "8"}
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu_mtp_run.py"), str(tmp_path / "w"),
           str(tmp_path / "o"), "--only", "peer_interleaved",
           "--vllm", f"{sys.executable} -m vllm_bisect.sim vllm", "--peer-conc", "2",
           "--peer-pairs", "2", "--peer-block-n", "4", "--peer-in", "64", "--peer-out", "64"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    res = tmp_path / "w" / "res"
    assert (res / "peer_interleaved_c2.json").exists(), r.stdout + r.stderr
    doc = json.loads((res / "peer_interleaved_c2.json").read_text())
    assert [b["side"] for b in doc["blocks"]] == ["bench", "probe", "probe", "bench"]
    for b in doc["blocks"]:
        assert len(b["per_request_ms"]) == 4 and (res / b["file"]).exists()
    bench0 = json.loads((res / "peer_interleaved_c2_bench00.json").read_text())
    assert bench0["output_lens"] == [64] * 4 and len(bench0["itls"]) == 4
    argv = (res / "peer_interleaved_c2_bench00_stdout.txt").read_text()
    assert "--num-warmups 0" in argv and "--dataset-name custom" in argv
    p = doc["paired"]
    assert p["n_pairs"] == 2 and p["balanced"]
    assert abs(p["mean_diff"]) < 0.05 and abs(p["pooled_diff"]) < 0.05
    assert abs(doc["paired_chunk"]["mean_diff"]) < 0.05
    assert "per token: mean" in (res / "peer_interleaved_c2_summary.md").read_text()
    # resumable: a second call finds the result and does not run the stage again
    r2 = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert "peer_interleaved: already done" in r2.stdout
