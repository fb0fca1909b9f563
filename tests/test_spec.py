"""Spec validation names the offending key."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_bisect.errors import SpecError
from vllm_bisect.spec import dump_spec, load_spec, parse_spec


def test_defaults_and_round_trip(tmp_path: Path) -> None:
    spec = parse_spec({"serve": {"speculative": {"method": "mtp", "num_speculative_tokens": 3}},
                       "verdict": {"symptom": "length"}})
    assert spec.range.first_parent is True
    assert spec.probe.max_tokens == 512 and spec.min_output_tokens() == 512
    assert spec.serve.speculative_config_json() == '{"method":"mtp","num_speculative_tokens":3}'
    p = tmp_path / "s.toml"
    p.write_text(dump_spec(spec))
    assert load_spec(p) == spec


@pytest.mark.parametrize("data,needle", [
    ({"probe": {"max_tokenz": 5}}, "probe.max_tokenz: unknown key"),
    ({"probe": {"max_tokens": "many"}}, "probe.max_tokens"),
    ({"bogus": {}}, "bogus: unknown key"),
    ({"build": {"kind": "command"}}, "build.serve"),
    ({"build": {"kind": "url"}}, "build.url"),
    ({"verdict": {"symptom": "itl"}}, "max_itl_ms or verdict.itl_factor"),
    ({"verdict": {"symptom": "fast"}}, "verdict.symptom"),
    ({"verdict": {"itl_factor": 0.5}}, "verdict.itl_factor"),
])
def test_bad_specs_name_the_key(data: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert needle in e.value.message


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[probe\nmax_tokens = 3")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(bad)


def test_cache_key_ignores_verdict() -> None:
    a = parse_spec({"verdict": {"symptom": "length"}})
    b = parse_spec({"verdict": {"symptom": "itl", "itl_factor": 2.0}})
    c = parse_spec({"probe": {"max_tokens": 100}})
    assert a.measurement_key("x") == b.measurement_key("x") != c.measurement_key("x")
    assert a.measurement_key("x") != a.measurement_key("y")


def test_load_grid_values_are_checked() -> None:
    from vllm_bisect.spec import LoadSpec

    grid = LoadSpec(concurrency=[1, 12], context=[2048, 32768], requests=4)
    assert [(c.concurrency, c.context, c.requests) for c in grid.cells()] == [
        (1, 2048, 4), (1, 32768, 4), (12, 2048, 12), (12, 32768, 12)]
    assert LoadSpec(concurrency=4).cells()[0].context is None
    for bad, msg in (({"concurrency": [0]}, "concurrency must be in 1..1024"),
                     ({"concurrency": []}, "at least one value"),
                     ({"context": [0]}, "context must be a positive"),
                     ({"context": []}, "at least one value")):
        with pytest.raises(ValueError, match=msg):
            LoadSpec.model_validate(bad)
