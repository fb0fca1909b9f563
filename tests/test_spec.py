"""Spec validation names the offending key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from vllm_bisect.errors import SpecError
from vllm_bisect.spec import (
    ArtifactKind,
    ImageBuild,
    SourceBuild,
    Strategy,
    WheelBuild,
    dump_spec,
    load_spec,
    parse_spec,
    stored_spec,
)


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
    ({"verdict": {"symptom": "itl", "strategy": "threshold"}},
     "max_itl_ms or verdict.itl_factor"),
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
    b = parse_spec({"probe": {"requests": 3}, "verdict": {"symptom": "itl", "itl_factor": 2.0}})
    c = parse_spec({"probe": {"max_tokens": 100}})
    assert a.measurement_key("x") == b.measurement_key("x") != c.measurement_key("x")
    # (under the two-level test an unset probe.requests starts with 1 request: a probe setting)
    d = parse_spec({"verdict": {"symptom": "itl", "itl_factor": 2.0, "strategy": "twolevel"}})
    assert d.probe.requests == 1 and d.measurement_key("x") != a.measurement_key("x")
    assert a.measurement_key("x") != a.measurement_key("y")


# -- [ops] and the measurement key ---------------------------------------------------------

BASE = {"build": {"kind": "wheel"}, "probe": {"bench": {"kind": "serve"}}}


def _key(**sections: dict[str, object]) -> str:
    data: dict[str, dict[str, object]] = {k: dict(v) for k, v in BASE.items()}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    return parse_spec(data).measurement_key("c" * 40)


@pytest.mark.parametrize("section,values", [
    ("ops", {"startup_timeout_s": 30.0}),
    ("ops", {"request_timeout_s": 5.0}),
    ("ops", {"bench_timeout_s": 60.0}),
    ("ops", {"serialize_startup": False}),
    ("ops", {"retries": 0}),
    ("ops", {"prefetch": False}),
    ("ops", {"cache_max_size": "10G"}),
    ("ops", {"hf_cache": "/srv/hf"}),
    ("ops", {"request_deadline_s": 30.0}),
    ("ops", {"min_tokens_per_s": 5.0}),
    ("ops", {"download_deadline_s": 10.0, "index_deadline_s": 5.0}),
    ("ops", {"max_wheel_size": "1G", "max_unpacked_size": "2G"}),
    ("serve", {"pass_env": ["HF_TOKEN"]}),
    ("parallel", {"workers": 4, "gpus": "0,1,2,3"}),
    ("range", {"good": "abc", "bad": "def", "first_parent": False}),
    ("verdict", {"symptom": "itl", "itl_factor": 2.0, "strategy": "sequential"}),
])
def test_operational_knobs_leave_the_key_unchanged(section: str, values: dict[str, object]) -> None:
    assert _key(**{section: values}) == _key()


@pytest.mark.parametrize("section,values", [
    ("build", {"index_url": "http://127.0.0.1:1"}),
    ("build", {"variant": "cu130"}),
    ("build", {"python": "3.12"}),
    ("build", {"kind": "source"}),
    ("build", {"kind": "image"}),
    ("serve", {"model": "other"}),
    ("serve", {"args": ["--enforce-eager"]}),
    ("serve", {"env": {"VLLM_GDN_DECODE_KERNEL": "triton"}}),
    ("serve", {"speculative": {"method": "mtp"}}),
    ("probe", {"max_tokens": 100}),
    ("probe", {"requests": 7}),
    ("probe", {"warmup": 0}),
    ("probe", {"temperature": 1.0}),
    ("probe", {"endpoint": "chat"}),
    ("probe", {"load": {"concurrency": 4}}),
    ("probe", {"bench": {"kind": "serve", "args": ["--num-prompts", "8"]}}),
])
def test_measurement_relevant_keys_change_the_key(section: str,
                                                  values: dict[str, object]) -> None:
    assert _key(**{section: values}) != _key()


@pytest.mark.parametrize("build", [
    {"kind": "image", "tags": ["a:{sha}"]}, {"kind": "image", "platform": "linux/arm64"},
    {"kind": "image", "gpus": [0]}, {"kind": "image", "shm_size": "8g"},
    {"kind": "source", "precompiled": True}, {"kind": "source", "install_args": ["-v"]},
    {"kind": "command", "serve": "b {port}"}, {"kind": "url", "url": "http://h:2"},
])
def test_every_kinds_options_change_the_key(build: dict[str, object]) -> None:
    plain = {"kind": build["kind"], **({"serve": "a {port}"} if build["kind"] == "command" else
                                       {"url": "http://h:1"} if build["kind"] == "url" else {})}
    assert _key(build=build) != _key(build=plain)


@pytest.mark.parametrize("data,needle", [
    ({"build": {"kind": "wheel", "tags": ["x"]}}, "build.tags is an image option; "
                                                   "build.kind is wheel"),
    ({"build": {"kind": "image", "python": "3.12"}}, "build.python is a wheel/source option; "
                                                      "build.kind is image"),
    ({"build": {"tags": ["x"]}}, "build.tags is an image option; build.kind is source"),
    ({"build": {"kind": "url", "url": "http://h", "serve": "x"}},
     "build.serve is a command option; build.kind is url"),
    ({"build": {"kind": "wheel", "bogus": 1}}, "build.bogus: unknown key"),
    ({"build": {"kind": "nope"}}, "build.kind: 'nope' is not one of"),
    ({"serve": {"startup_timeout_s": 5}}, "serve.startup_timeout_s moved to ops.startup_timeout_s"),
    ({"serve": {"serialize_startup": False}}, "moved to ops.serialize_startup"),
    ({"serve": {"retries": 0}}, "serve.retries moved to ops.retries"),
    ({"probe": {"request_timeout_s": 5}}, "probe.request_timeout_s moved to ops.request_timeout_s"),
    ({"probe": {"bench": {"timeout_s": 5}}}, "probe.bench.timeout_s moved to ops.bench_timeout_s"),
    ({"build": {"kind": "image", "hf_cache": "/x"}}, "build.hf_cache moved to ops.hf_cache"),
    ({"build": {"prefetch": True}}, "build.prefetch moved to ops.prefetch"),
    ({"build": {"cache_max_size": "1G"}}, "build.cache_max_size moved to ops.cache_max_size"),
    ({"ops": {"retries": -1}}, "ops.retries"),
    ({"verdict": {"strategy": "fastest"}}, "verdict.strategy"),
])
def test_layout_errors_name_the_key_and_the_fix(data: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert needle in e.value.message, e.value.message


def test_build_models_strategy_enum_and_prefetch_default(tmp_path: Path) -> None:
    wheel = parse_spec({"build": {"kind": "wheel", "variant": "cu130"},
                        "verdict": {"symptom": "itl", "strategy": "sequential"}})
    assert isinstance(wheel.build, WheelBuild) and wheel.build.kind is ArtifactKind.WHEEL
    assert wheel.verdict.strategy is Strategy.SEQUENTIAL and wheel.verdict.strategy == "sequential"
    assert wheel.prefetch_enabled() and not parse_spec({}).prefetch_enabled()
    assert not parse_spec({"build": {"kind": "wheel"}, "ops": {"prefetch": False}}).prefetch_enabled()
    assert isinstance(parse_spec({}).build, SourceBuild)
    image = parse_spec({"build": {"kind": "image", "tags": ["r:{sha}"]},
                        "ops": {"hf_cache": "", "retries": 0}})
    assert isinstance(image.build, ImageBuild) and image.ops.hf_cache == ""
    for spec in (wheel, image, parse_spec({"build": {"kind": "command", "serve": "s {port}"}})):
        p = tmp_path / "s.toml"
        p.write_text(dump_spec(spec))
        assert load_spec(p) == spec
        assert load_spec(p).measurement_key("x") == spec.measurement_key("x")
        assert stored_spec(spec.model_dump_json(), source="j") == spec


def test_stored_spec_keeps_none_values() -> None:
    spec = parse_spec({"probe": {"send_max_tokens": False, "max_tokens": None},
                       "verdict": {"min_output_tokens": 100}})
    assert stored_spec(spec.model_dump_json(), source="j") == spec
    assert stored_spec(dump_spec(spec), source="old session").probe.max_tokens == 512  # TOML: lossy


OLD_SESSION_SPEC = """[range]
repo = "."
[build]
kind = "wheel"
python = "3.12"
precompiled = false
full_build = true
install_args = []
prefetch = false
cache_max_size = "50G"
index_url = "http://127.0.0.1:1"
variant = "cu130"
tags = ["x:{sha}"]
platform = "auto"
build = false
gpus = "all"
network = "host"
hf_cache = "/srv/hf"
[serve]
model = "m"
startup_timeout_s = 60.0
serialize_startup = false
retries = 1
[probe]
request_timeout_s = 30.0
bench = { kind = "serve", args = [], timeout_s = 99.0 }
"""


def test_a_session_stored_by_the_earlier_layout_still_resumes() -> None:
    spec = stored_spec(OLD_SESSION_SPEC, source="old journal")
    assert isinstance(spec.build, WheelBuild) and spec.build.variant == "cu130"
    assert spec.build.python == "3.12" and spec.serve.model == "m"
    o = spec.ops
    assert (o.startup_timeout_s, o.serialize_startup, o.retries, o.request_timeout_s,
            o.bench_timeout_s, o.prefetch, o.cache_max_size, o.hf_cache) == (
        60.0, False, 1, 30.0, 99.0, False, "50G", "/srv/hf")
    with pytest.raises(SpecError, match="moved to ops"):  # a spec file is not migrated silently
        parse_spec(tomllib.loads(OLD_SESSION_SPEC))


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
