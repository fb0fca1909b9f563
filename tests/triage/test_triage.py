"""Triage of realistic regression reports (English, Chinese, tables, prose)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import history
from vllm_bisect.spec import load_spec
from vllm_bisect.triage import resolve_refs, triage, validated_spec

REPORTS = Path(__file__).parent / "reports"


def read(name: str) -> str:
    return (REPORTS / name).read_text()


def test_mtp_gb10_report() -> None:
    t = triage(read("mtp_gb10.md"))
    assert (t.good, t.bad) == ("e312c5cb2", "a16dbd5b8")
    assert t.symptom == "any" and t.min_output_tokens == 129
    assert t.itl_factor is not None and 2.0 < t.itl_factor < 3.0  # sqrt(72 / 10)
    assert t.model == "Qwen/Qwen3.6-35B-A3B-NVFP4"
    assert t.speculative == {"method": "mtp", "num_speculative_tokens": 3}
    assert t.hardware["gpu"] == "GB10" and t.hardware["arch"] == "aarch64"
    assert t.hardware["variant"] == "cu130"
    assert t.env == {"CUTE_DSL_ARCH": "sm_121a"}
    assert t.serve_args == ["--max-model-len", "32768"]  # --port dropped, spec config parsed
    spec = validated_spec(t)
    assert spec.build.kind == "image" and spec.build.platform == "linux/arm64"
    assert spec.probe.max_tokens == 1024 and spec.verdict.symptom == "any"
    assert not [u for u in t.unknowns if u.startswith(("good", "bad", "model"))]


def test_gdn_fix_report_warns_about_direction() -> None:
    t = triage(read("gdn_fix.md"))
    assert t.fixed_by == ["59735"]
    refs = {p.ref: p.verdict for p in t.points}
    assert refs["e4294144a8ca4e57da712934dca33f89bef8fe78"] == "good"
    assert refs["21c08ac4589"] == "bad"
    assert t.hardware == {"gpu": "H200", "tensor_parallel": 2}
    assert t.env == {"VLLM_GDN_DECODE_KERNEL": "cuda"}
    assert t.benchmark and t.benchmark.startswith("vllm bench throughput")
    assert any("throughput probe is not built" in w for w in t.warnings)
    assert validated_spec(t).serve.args == ["--tensor-parallel-size", "2"]


def test_chinese_report() -> None:
    t = triage(read("chinese.md"))
    assert (t.good, t.bad) == ("v0.22.1", "9f8e7d6c5")
    assert t.symptom == "any" and t.min_output_tokens == 129
    assert t.model == "Qwen/Qwen3-30B-A3B-Instruct-2507" and t.hardware["gpu"] == "H100"
    assert t.speculative == {"method": "mtp", "num_speculative_tokens": 3}


def test_report_without_commits_lists_unknowns() -> None:
    t = triage(read("benchmark_only.md"))
    assert t.good is None and t.bad is None
    assert any(u.startswith("good") for u in t.unknowns)
    assert any(u.startswith("bad") for u in t.unknowns)
    assert t.hardware["gpu"] == "RTX 5090" and t.model == "Qwen/Qwen3.6-27B-NVFP4"


def test_contradicting_rows_warn_and_pick_consistently() -> None:
    t = triage(read("contradiction.md"))
    assert t.good == "8badf00d1" and t.bad == "2325b6f0"
    assert any("contradict" in w for w in t.warnings)
    assert t.symptom == "itl"


def test_nothing_is_run_and_odd_flags_are_dropped() -> None:
    t = triage("Regressed on `deadbeef1` (bad), fine at `cafebabe2` (good). "
               "`vllm serve org/Model-7B --port 1 --chat-template $(rm -rf ~) --max-num-seqs 8`")
    assert "--chat-template" not in t.serve_args and t.serve_args == ["--max-num-seqs", "8"]
    assert any("dropped --chat-template" in w for w in t.warnings)


def test_refs_resolve_against_a_repo(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6)
    import git

    repo = git.Repo(h.path)
    repo.create_tag("v0.22.1", ref=h.shas[1])
    text = f"- v0.22.1: fine\n- 0.23.0rc1.dev5+g{h.shas[5][:9]}: regressed, capped at 128 tokens"
    t = triage(text)
    resolve_refs(t, repo)
    assert (t.good, t.bad) == (h.shas[1], h.shas[5])


def test_cli_writes_a_valid_spec(tmp_path: Path) -> None:
    out = tmp_path / "spec.toml"
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "triage",
                        str(REPORTS / "mtp_gb10.md"), "--write", str(out), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("good", "bad", "symptom", "model", "hardware", "speculative", "unknowns"):
        assert key in doc
    spec = load_spec(out)
    assert spec.range.good == "e312c5cb2" and spec.serve.speculative is not None
