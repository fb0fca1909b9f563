"""Reading a series: bench serve results (the real captured format), CSV, JSON lines; refs
resolved in a real repository."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from vllm_bisect.errors import RangeError, SpecError
from vllm_bisect.watch.plan import resolve_ref
from vllm_bisect.watch.series import higher_is_better, load_series, parse_time, sha_in

FIXTURE = Path(__file__).parents[1] / "fixtures" / "vllm-0.25.1-bench" / "bench_serve.json"


def bench_dir(tmp: Path, refs: list[str], itl: list[float]) -> Path:
    """`vllm bench serve --save-result` files made from the real captured one."""
    real = json.loads(FIXTURE.read_text())
    d = tmp / "results"
    d.mkdir()
    for i, (ref, v) in enumerate(zip(refs, itl, strict=True)):
        doc = {**real, "mean_itl_ms": v, "mean_tpot_ms": v, "commit": ref,
               "date": f"202611{1 + i // 24:02d}-{i % 24:02d}0000"}
        (d / f"bench-{i:03d}.json").write_text(json.dumps(doc))
    (d / "notes.json").write_text(json.dumps({"not": "a bench result"}))
    return d


def test_bench_serve_results_with_metadata_commits(tmp_path: Path) -> None:
    refs = [f"{i:07x}" for i in range(10)]
    s = load_series(bench_dir(tmp_path, refs[::-1], [float(i) for i in range(10)]))
    assert s.source == "bench-serve" and len(s.points) == 10
    assert [p.ref for p in s.points] == refs[::-1]        # ordered by the files' dates
    assert "mean_itl_ms" in s.metrics() and "output_throughput" in s.metrics()
    assert not any(k in s.metrics() for k in ("num_prompts", "duration", "itls", "date"))
    assert s.settings["max_concurrency"] == 4 and s.settings["num_prompts"] == 16


def test_csv_and_jsonl(tmp_path: Path) -> None:
    csv_path = tmp_path / "s.csv"
    csv_path.write_text("commit,time,tok_s,note\n" + "".join(
        f"v{i},2026-10-{10 - i:02d}T00:00:00,{100 + i},x\n" for i in range(6)))
    s = load_series(csv_path)
    assert [p.ref for p in s.points] == [f"v{i}" for i in range(5, -1, -1)]  # by time
    assert s.metrics() == ["tok_s"]
    jl = tmp_path / "s.jsonl"
    jl.write_text("\n".join(json.dumps({"version": f"0.1.dev{i}+g{i:07x}", "itl_ms": i})
                            for i in range(5)) + "\n\n")
    s = load_series(jl)
    assert s.source == "jsonl" and s.points[0].ref == "0.1.dev0+g0000000"
    assert s.metrics() == ["itl_ms"]


def test_bad_series_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        load_series(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="save-result"):
        load_series(tmp_path / "empty")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"commit": "a"}\n{oops\n')
    with pytest.raises(SpecError, match=r"bad.jsonl:2"):
        load_series(bad)
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(SpecError, match="unknown series format"):
        load_series(tmp_path / "x.txt")


def test_refs_and_times() -> None:
    assert sha_in("0.23.1rc1.dev471+ge312c5cb2") == "e312c5cb2"
    assert sha_in("nightly-2f3f441f8abc") == "2f3f441f8abc"
    assert sha_in("v0.10.2") is None
    assert parse_time("20261202-191602") is not None and parse_time(1.7e9) is not None
    assert parse_time("yesterday") is None
    assert higher_is_better("output_throughput") and not higher_is_better("mean_itl_ms")


def test_resolve_ref_in_a_real_repo(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path / "r", initial_branch="main")
    (tmp_path / "r" / "f").write_text("1")
    repo.index.add(["f"])
    c = repo.index.commit("one")
    repo.create_tag("v0.10.2")
    assert resolve_ref(repo, c.hexsha[:9]) == c.hexsha
    assert resolve_ref(repo, f"0.10.3rc1.dev1+g{c.hexsha[:9]}") == c.hexsha
    assert resolve_ref(repo, "0.10.2") == c.hexsha
    with pytest.raises(RangeError, match="names no commit"):
        resolve_ref(repo, "deadbeef99")


def test_a_throughput_window_measures_what_the_series_measured(tmp_path: Path) -> None:
    # a bench-serve series: the window's spec runs `vllm bench serve` with the series' own
    # settings ([probe.bench]) and judges throughput at a factor halfway into the step
    import numpy as np

    from vllm_bisect.spec import parse_spec
    from vllm_bisect.watch.plan import find, window_spec

    rng = np.random.default_rng(2)
    refs = [f"{i:07x}" for i in range(40)]
    d = bench_dir(tmp_path, refs, [10.0] * 40)
    for i, f in enumerate(sorted(d.glob("bench-*.json"))):
        doc = json.loads(f.read_text())
        doc["output_throughput"] = 900 * (1 + 0.02 * rng.standard_normal()) * (0.8 if i >= 25 else 1)
        f.write_text(json.dumps(doc))
    s = load_series(d)
    f = next(x for x in find(s, ["output_throughput"]) if x.cp.reported)
    assert f.direction.value == "regression"
    spec = window_spec(parse_spec({}), s, f)
    assert spec.verdict.symptom == "throughput"
    assert spec.verdict.throughput_factor is not None and 1.05 < spec.verdict.throughput_factor < 1.2
    assert spec.probe.bench is not None and spec.probe.bench.kind == "serve"
    assert spec.probe.bench.args == ["--num-prompts", "16", "--max-concurrency", "4",
                                     "--request-rate", "inf"]
    assert spec.range.good == f.before.ref and spec.range.bad == f.after.ref
