"""vLLM's benchmarks as probes: parsers on vLLM 0.25.1's own files, and `vllm bench serve`
run end to end through a bisect (the simulator's synthetic vllm has the command)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bisect.test_driver import run_driver
from tests.helpers import history, make_spec
from vllm_bisect.errors import ProbeError
from vllm_bisect.probes.vllm_bench import parse_serve, parse_throughput

CAPTURED = Path(__file__).parents[1] / "fixtures" / "vllm-0.25.1-bench"


def test_parse_real_bench_serve_result() -> None:
    r = parse_serve(json.loads((CAPTURED / "bench_serve.json").read_text()))
    assert r.tool == "serve" and r.completed == 16 and r.failed == 0
    assert r.output_tok_s == pytest.approx(935.74, abs=0.01)
    assert r.total_tok_s == pytest.approx(1228.16, abs=0.01)
    assert r.tpot_ms == pytest.approx(4.17, abs=0.01)
    # the same numbers vLLM printed
    printed = (CAPTURED / "bench_serve_stdout.txt").read_text()
    assert "Output token throughput (tok/s):         935.74" in printed


def test_parse_real_bench_throughput_result() -> None:
    doc = json.loads((CAPTURED / "bench_throughput.json").read_text())
    stdout = (CAPTURED / "bench_throughput_stdout.txt").read_text()
    r = parse_throughput(doc, stdout)
    assert r.completed == 32 and r.total_tok_s == pytest.approx(37790.63, abs=0.01)
    assert r.output_tok_s == pytest.approx(4198.96)  # from the printed line: not in the JSON
    assert parse_throughput(doc).output_tok_s is None


def test_wrong_files_are_probe_errors() -> None:
    with pytest.raises(ProbeError, match="output_throughput"):
        parse_serve({"tokens_per_second": 1.0})
    with pytest.raises(ProbeError, match="tokens_per_second"):
        parse_throughput({"output_throughput": 1.0})


def test_bench_serve_throughput_bisect(tmp_path: Path) -> None:
    # 10 ms engine steps (issue 50: at 4 ms, scheduling delays under load judged a good
    # commit's throughput against the 1.5x threshold)
    h = history(tmp_path, n_commits=8, slow_at=5, slow_factor=3.0, step_ms=10.0)
    spec = make_spec(h, probe={"max_tokens": 32, "bench": {
        "kind": "serve", "args": ["--dataset-name", "random", "--num-prompts", "8",
                                  "--max-concurrency", "4", "--random-output-len", "48"]}},
                     verdict={"symptom": "throughput", "throughput_factor": 1.5,
                              "strategy": "threshold", "verify_samples": 0})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["itl"]
    bad = next(o for o in r.probed if o.commit == h.bad)
    assert "(vllm bench serve)" in bad.reason
    assert bad.measurement and bad.measurement.bench and bad.measurement.bench.completed == 8


def test_peer_check_on_real_mtp() -> None:
    """The probe and `vllm bench serve` on the same real MTP server, concurrency 1
    (tests/fixtures/vllm-0.25.1-mtp/, docs/validation.md (d))."""
    import json as _json

    from vllm_bisect.models import Measurement
    from vllm_bisect.probes.peer import peer_check

    mtp = Path(__file__).parents[1] / "fixtures" / "vllm-0.25.1-mtp"
    m = Measurement.model_validate_json((mtp / "probe_peer_c1.json").read_text())
    pc = peer_check(m, _json.loads((mtp / "bench_serve_mtp_c1.json").read_text()))
    assert round(pc.per_chunk_diff, 3) == -0.005          # per verify step: within 0.5%
    assert round(pc.per_token_diff, 3) == -0.065          # per token: 6.5% apart ...
    assert not pc.agrees(0.03)
    assert pc.bench_tokens_per_chunk is not None and pc.probe_tokens_per_chunk is not None
    assert round(pc.bench_tokens_per_chunk, 2) == 2.66 and round(pc.probe_tokens_per_chunk, 2) == 2.81
    adjusted = pc.acceptance_adjusted_diff              # ... because acceptance differed
    assert adjusted is not None and abs(adjusted) < 0.015


def test_peer_check_same_prompt_on_real_mtp() -> None:
    """Session 4: bench's custom dataset fed the probe's own 256-token prompt, both warmed at
    concurrency 4 (run 2 of docs/validation.md (e); generated_texts dropped from the bench file)."""
    import json as _json

    from vllm_bisect.models import Measurement
    from vllm_bisect.probes.peer import peer_check

    mtp = Path(__file__).parents[1] / "fixtures" / "vllm-0.25.1-mtp"
    m = Measurement.model_validate_json((mtp / "probe_peer_same_prompt_c4_run2.json").read_text())
    bench = _json.loads((mtp / "bench_serve_mtp_same_prompt_c4_run2.json").read_text())
    pc = peer_check(m, bench)
    # same prompts: the same tokens per chunk on both sides, so per token = per chunk
    assert pc.bench_tokens_per_chunk == pytest.approx(pc.probe_tokens_per_chunk)
    assert pc.per_token_diff == pytest.approx(pc.per_chunk_diff, abs=1e-4)
    assert round(pc.per_token_diff, 4) == -0.0118 and pc.agrees(0.03)
    # the probe's chunk gap is vLLM's own ITL histogram over the same window
    assert m.server_itl_ms is not None
    assert pc.probe_chunk_itl_ms == pytest.approx(m.server_itl_ms, rel=1e-4)
