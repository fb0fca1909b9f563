"""The TTFT symptom: its threshold verdict and what the two-level test samples."""

from __future__ import annotations

from vllm_bisect.models import Measurement, RequestResult, TokensSource, Verdict
from vllm_bisect.spec import Symptom, VerdictSpec
from vllm_bisect.verdict import Judge
from vllm_bisect.verdict.auto import Strategy, choose_strategy, direction, samples_of


def measurement(ttfts: list[float]) -> Measurement:
    reqs = [RequestResult(output_tokens=10, finish_reason="length", ttft_ms=t, latency_ms=t + 90,
                          itl_ms=10.0, chunk_itl_ms=10.0, tpot_ms=10.0, n_chunks=10,
                          tokens_per_chunk=1.0, tokens_source=TokensSource.USAGE)
            for t in ttfts]
    return Measurement(endpoint="completions", model="m", requested_tokens=10,
                       min_output_tokens=10, output_tokens=[10] * len(ttfts), length_ok=True,
                       itl_ms=10.0, chunk_itl_ms=10.0, tokens_per_chunk=1.0,
                       ttft_ms=sorted(ttfts)[len(ttfts) // 2], tpot_ms=10.0,
                       finish_reasons=["length"] * len(ttfts), tokens_source=TokensSource.USAGE,
                       requests=reqs, prompt_tokens=4096)


def test_ttft_threshold_against_the_good_endpoint() -> None:
    j = Judge(VerdictSpec(symptom=Symptom.TTFT, ttft_factor=2.0), None)
    assert j.needs_reference
    j = j.with_reference(measurement([80.0, 82.0, 81.0]))
    bad = j.judge(measurement([330.0, 320.0, 325.0]))
    assert bad.verdict is Verdict.BAD and "TTFT 325.0 ms > 162.0 ms (4096-token prompt)" in bad.reason
    assert j.judge(measurement([90.0, 95.0, 85.0])).verdict is Verdict.GOOD
    fixed = Judge(VerdictSpec(symptom=Symptom.TTFT, max_ttft_ms=100.0), None)
    assert not fixed.needs_reference and fixed.judge(measurement([120.0])).verdict is Verdict.BAD


def test_ttft_runs_the_model_of_the_range_on_per_request_ttft() -> None:
    v = VerdictSpec(symptom=Symptom.TTFT, ttft_factor=1.5)
    assert choose_strategy(v).strategy is Strategy.CHANGEPOINT and "1.5x" in choose_strategy(v).reason
    assert direction(Symptom.TTFT) == 1
    assert samples_of(measurement([80.0, 90.0]), Symptom.TTFT) == [80.0, 90.0]
    assert choose_strategy(VerdictSpec(symptom=Symptom.MEMORY)).strategy is Strategy.THRESHOLD
