"""verdict.strategy = "auto": which strategy each symptom gets, and what the two-level test
samples."""

from __future__ import annotations

import pytest

from vllm_bisect.errors import SpecError
from vllm_bisect.models import LoadResult, Measurement, RequestResult, TokensSource
from vllm_bisect.spec import Symptom, VerdictSpec, parse_spec
from vllm_bisect.verdict.auto import (
    Strategy,
    choose_strategy,
    direction,
    per_request,
    samples_of,
    smallest_change,
)

URL = {"build": {"kind": "url", "url": "http://127.0.0.1:1"}}


@pytest.mark.parametrize("symptom,want", [
    ("length", Strategy.THRESHOLD), ("correctness", Strategy.THRESHOLD),
    ("crash", Strategy.BAYES), ("itl", Strategy.CHANGEPOINT),
    ("throughput", Strategy.CHANGEPOINT), ("ttft", Strategy.CHANGEPOINT),
    ("mtp-speedup", Strategy.CHANGEPOINT), ("any", Strategy.THRESHOLD)])
def test_auto_picks_by_symptom(symptom: str, want: Strategy) -> None:
    c = choose_strategy(VerdictSpec(symptom=Symptom(symptom)))
    assert c.strategy is want and c.reason.startswith("auto:")


def test_a_written_strategy_is_kept() -> None:
    c = choose_strategy(VerdictSpec(symptom=Symptom.ITL, strategy="sequential"))
    assert c.strategy is Strategy.SEQUENTIAL and "was written" in c.reason


def test_smallest_change_and_direction() -> None:
    assert smallest_change(VerdictSpec(symptom=Symptom.ITL, itl_factor=1.15)) == 1.15
    assert smallest_change(VerdictSpec(symptom=Symptom.THROUGHPUT, throughput_factor=1.2)) == 1.2
    assert smallest_change(VerdictSpec(symptom=Symptom.ITL, min_effect=0.05)) == 1.05
    assert direction(Symptom.ITL) == 1 and direction(Symptom.THROUGHPUT) == -1
    assert per_request(Symptom.ITL) and not per_request(Symptom.MTP_SPEEDUP)


def test_default_spec_is_auto_and_its_requests_follow_the_strategy_that_runs() -> None:
    # the model of the range (auto's choice with one worker): three requests a server at
    # least (a server's own spread, and a fence against one slow request)
    s = parse_spec({**URL, "verdict": {"symptom": "itl"}})
    assert s.verdict.strategy == "auto" and s.probe.requests == 3
    cp = parse_spec({**URL, "verdict": {"symptom": "itl", "strategy": "changepoint"}})
    assert cp.probe.requests == 3
    # the two-level test (written) starts with one request; auto with k workers runs the
    # model (k a round): three, as on one worker
    two = parse_spec({**URL, "verdict": {"symptom": "itl", "strategy": "twolevel"}})
    assert two.probe.requests == 1
    k = parse_spec({**URL, "parallel": {"workers": 3}, "verdict": {"symptom": "ttft"}})
    assert k.probe.requests == 3
    k2 = parse_spec({**URL, "parallel": {"workers": 3},
                     "verdict": {"symptom": "ttft", "strategy": "twolevel"}})
    assert k2.probe.requests == 1
    kept = parse_spec({**URL, "probe": {"requests": 4}, "verdict": {"symptom": "itl"}})
    assert kept.probe.requests == 4
    assert parse_spec({**URL, "verdict": {"symptom": "length"}}).probe.requests == 3
    # stable through a dump and a re-parse (the measurement key)
    assert two.with_overrides(verdict={"alpha": 0.02}).probe.requests == 1
    assert k2.with_overrides(verdict={"alpha": 0.02}).probe.requests == 1


@pytest.mark.parametrize("symptom", ["itl", "ttft", "throughput", "mtp-speedup"])
def test_auto_runs_the_model_of_the_range_where_it_can_and_says_why_not_elsewhere(
        symptom: str) -> None:
    """`run` on one worker or k, and the hook: the model of the range; the studies, each
    commit judged alone: the two-level test. Each reason names what runs."""
    from vllm_bisect.bisect.policies import resolve

    spec = parse_spec({**URL, "probe": {"load": {"concurrency": 2}, "mtp_speedup": {}},
                       "serve": {"speculative": {"method": "mtp", "num_speculative_tokens": 1}},
                       "verdict": {"symptom": symptom, "min_mtp_speedup": 1.5,
                                   "throughput_factor": 1.2}})
    one = resolve(spec)
    assert one.strategy is Strategy.CHANGEPOINT and one.models_range
    assert "one model of the range" in one.reason and one.reason.startswith("auto:")
    k = resolve(spec, workers=4)
    assert k.strategy is Strategy.CHANGEPOINT and k.models_range
    assert k.reason.startswith(one.reason) and "with 4 workers it picks 4 measurements" in k.reason
    alone = resolve(spec, per_commit=True)
    assert alone.strategy is Strategy.TWOLEVEL and "judged alone" in alone.reason
    assert "the studies" in alone.reason
    # a written strategy is what runs, whatever the workers
    for written in ("changepoint", "twolevel"):
        w = spec.with_overrides(verdict={"strategy": written})
        assert resolve(w, workers=4).strategy is Strategy(written)
        assert resolve(w, per_commit=True).strategy is Strategy(written)


def test_twolevel_needs_a_continuous_symptom() -> None:
    with pytest.raises(SpecError, match="twolevel"):
        parse_spec({**URL, "verdict": {"symptom": "length", "strategy": "twolevel"}})


def test_lock_clocks_changes_the_measurement_key_only_when_on() -> None:
    a = parse_spec(URL)
    b = parse_spec({**URL, "serve": {"lock_clocks": True}})
    assert a.measurement_key("x") != b.measurement_key("x")
    assert a.measurement_key("x") == parse_spec({**URL, "serve": {"lock_clocks": False,
                                                                    "lock_clocks_mhz": 1500}}
                                                ).measurement_key("x")


def _m(itls: list[float], tok_s: float | None = None, speedup: float | None = None
       ) -> Measurement:
    reqs = [RequestResult(output_tokens=10, finish_reason="length", ttft_ms=1.0, latency_ms=1.0,
                          itl_ms=x, chunk_itl_ms=x, tpot_ms=x, n_chunks=10,
                          tokens_per_chunk=1.0, tokens_source=TokensSource.USAGE) for x in itls]
    load = (LoadResult(concurrency=4, requests=8, errors=0, duration_s=1.0, output_tokens=100,
                       output_tok_s=tok_s, tpot_ms=1.0) if tok_s else None)
    return Measurement(endpoint="completions", model="m", requested_tokens=10,
                       min_output_tokens=10, output_tokens=[10] * len(itls), length_ok=True,
                       itl_ms=None, chunk_itl_ms=None, tokens_per_chunk=None, ttft_ms=None,
                       tpot_ms=None, finish_reasons=[], tokens_source=TokensSource.USAGE,
                       requests=reqs, load=load, mtp_speedup=speedup)


def test_samples_per_symptom() -> None:
    assert samples_of(_m([2.0, 3.0]), Symptom.ITL) == [2.0, 3.0]
    assert samples_of(_m([2.0], tok_s=410.0), Symptom.THROUGHPUT) == [410.0]
    assert samples_of(_m([], speedup=1.7), Symptom.MTP_SPEEDUP) == [1.7]
    assert samples_of(None, Symptom.ITL) == []


def test_one_rule_table_for_the_chooser_the_defaults_and_the_validator() -> None:
    """auto's choice, the one-request default and the validator's refusals all follow the
    table in spec/verdict.py (issue 43): changing an entry there changes all three."""
    from vllm_bisect.bisect.policies import resolve
    from vllm_bisect.spec import Strategy as S
    from vllm_bisect.spec import Symptom, parse_spec
    from vllm_bisect.spec.verdict import AUTO_STRATEGY, JUDGES, NO_FIX_SEARCH, PER_REQUEST
    from vllm_bisect.verdict.auto import choose_strategy

    assert set(AUTO_STRATEGY) == set(Symptom)
    base = {"probe": {"max_tokens": 64, "temperature": 0.0, "load": {"concurrency": 2},
                      "mtp_speedup": {}},
            "serve": {"speculative": {"method": "mtp", "num_speculative_tokens": 1}}}
    verdict = {"itl_factor": 1.2, "ttft_factor": 1.2, "throughput_factor": 1.2,
               "min_mtp_speedup": 1.5}
    for symptom in Symptom:
        spec = parse_spec({**base, "verdict": {**verdict, "symptom": symptom.value}})
        assert choose_strategy(spec.verdict).strategy is AUTO_STRATEGY[symptom]
        one = symptom in PER_REQUEST and AUTO_STRATEGY[symptom] is S.TWOLEVEL
        assert (spec.probe.requests == 1) is one, symptom
        for strategy, judged in JUDGES.items():
            written = {**base, "verdict": {**verdict, "symptom": symptom.value,
                                           "strategy": strategy.value}}
            if symptom in judged:
                parse_spec(written)
            else:
                with pytest.raises(SpecError, match=f'"{strategy.value}" needs'):
                    parse_spec(written)
        fix = {**base, "range": {"search": "fix"},
               "verdict": {**verdict, "symptom": symptom.value}}
        assert resolve(parse_spec(fix)).strategy not in NO_FIX_SEARCH
