"""Triage of the founding reports and of the rules that generalise over the corpus."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import git

from tests.helpers import abbrev, history
from vllm_bisect.spec import load_spec
from vllm_bisect.triage import compare_command, resolve_refs, triage, triage_json, validated_spec
from vllm_bisect.triage.refs import version_key

CORPUS = Path(__file__).parent / "corpus"


def read(name: str) -> str:
    return (CORPUS / name / "report.md").read_text()


def test_mtp_gb10_report_gives_cap_and_itl() -> None:
    for name in ("founding-47297-en", "founding-47297-zh"):
        t = triage(read(name))
        assert (t.good, t.bad) == ("e312c5cb2", "a16dbd5b8"), name
        assert set(t.symptoms) == {"itl", "length"} and t.symptom == "any", name
        assert t.cap_tokens == 128 and t.itl_factor is not None and 2 < t.itl_factor < 3
        assert t.speculative == {"method": "mtp", "num_speculative_tokens": 3}
        assert t.hardware["gpu"] == "GB10" and t.hardware["arch"] == "aarch64"
        spec = validated_spec(t)
        assert spec.build.kind == "image" and spec.build.platform == "linux/arm64"
        assert spec.verdict.symptom == "any" and spec.probe.max_tokens == 1024
        assert spec.range.search == "regression"
    # the later nightly is bad too, but cannot be ordered without a repository: said so
    assert any("93d8f834d" in w for w in triage(read("founding-47297-en")).warnings)


def test_mtp_sweep_post_gives_no_range_and_no_url_hash() -> None:
    for name in ("founding-mtp-sweep-en", "founding-mtp-sweep-zh"):
        t = triage(read(name))
        assert t.good is None and t.bad is None, name
        assert not any("f4517815" in str(p["ref"]) for p in t.points)
        assert t.local_model == "/path/to/Qwen3.6-27B-NVFP4"
        assert t.model == "Qwen3.6-27B-NVFP4"  # the name in the path (round 4), not a hub id
        assert t.hardware["tensor_parallel"] == 1  # the command's TP, not the prose's TP=2
        assert set(t.symptoms) == {"crash", "mtp-speedup"}
        assert any(u.startswith("good") for u in t.unknowns)


def test_gdn_report_is_find_the_fix_without_speculative_decoding() -> None:
    for name in ("founding-59520-en", "founding-59520-zh"):
        t = triage(read(name))
        assert t.search.value == "fix", name
        assert t.good == "21c08ac4589" and t.bad is not None and t.bad.startswith("e4294144a8")
        assert t.speculative is None and t.fixed_by == ["59735"]
        assert 1490.131 in t.numbers["tok_s"] and 1921.0 in t.numbers["tok_s"]
        assert t.symptoms == ["throughput"]
        spec = validated_spec(t)
        assert spec.range.search == "fix" and spec.serve.speculative is None
        assert spec.probe.bench is not None and spec.probe.bench.kind == "throughput"
        assert "--dataset-name" in spec.probe.bench.args and "prefix_repetition" in spec.probe.bench.args
        assert spec.serve.args == ["--tensor-parallel-size", "2"]
        cmd = compare_command(t)
        assert cmd is not None and "--commit 21c08ac4589" in cmd
        assert "VLLM_GDN_DECODE_KERNEL=cuda" in cmd and "VLLM_GDN_DECODE_KERNEL=triton" in cmd
        assert not any("not built yet" in w for w in t.warnings)


def test_versions_order_by_pep440_with_dev_numbers() -> None:
    keys = [version_key(v) for v in ("0.23.1rc1.dev471", "0.23.1rc1.dev601", "0.23.1rc1",
                                     "0.23.1", "0.23.1.post1")]
    assert keys == sorted(keys)  # type: ignore[type-var]
    # rows in any order: the latest good before the earliest bad
    t = triage("| version | status |\n|---|---|\n| 0.23.1 | ❌ |\n| 0.23.1rc1.dev601+ga16dbd5b8 | ❌ |\n"
               "| 0.23.1rc1.dev471+ge312c5cb2 | ✅ |\n| 0.22.0 | ✅ |\n")
    assert (t.good, t.bad) == ("e312c5cb2", "a16dbd5b8")


def test_a_marker_binds_to_its_own_clause() -> None:
    t = triage("v0.10.2 works fine; v0.11.0 is slow and so is v0.12.0.")
    assert (t.good, t.bad) == ("v0.10.2", "v0.11.0")
    t = triage("Last good: v0.20.0, first observed regressed at v0.21.1 (v0.21.0 not tested)")
    assert (t.good, t.bad) == ("v0.20.0", "v0.21.1")
    t = triage("With v0.10.2 we get ~60 tok/s but only 28 tok/s after upgrading to v0.12.0.")
    assert (t.good, t.bad) == ("v0.10.2", "v0.12.0") and t.symptoms == ["throughput"]
    t = triage("qwen3 在 v0.13.0 相比 0.13.0rc1 出现性能劣化，TPOT 劣化 7%")
    assert (t.good, t.bad) == ("v0.13.0rc1", "v0.13.0") and "itl" in t.symptoms


def test_shas_only_from_commit_looking_contexts() -> None:
    t = triage("![chart](https://preview.redd.it/x.png?width=640&s=f4517815a4db6a0c2f4b0c9e7d1a3b5c8e9f0a1b)\n"
               "<img src=\"https://github.com/user-attachments/assets/3d1b1f5f-abff-4501-97e5-58f87bcc0a2e\">\n"
               "see https://hud.example/x?lCommit=baed180aa00314897b37b4b0af65adeba06f3d77\n"
               "hex words deadbeef cafe1234 are not commits\n")
    assert t.points == []
    t = triage("good: https://github.com/vllm-project/vllm/commit/ffd46bfab2128bb84146050e98b51a617c6575ab\n"
               "bad: `20dcd984f` (nightly-abc123def4 image too)\n")
    refs = [p["ref"] for p in t.points]
    assert refs[0].startswith("ffd46bfab") and "20dcd984f" in refs and "abc123def4" in refs
    assert (t.good, t.bad) == ("ffd46bfab2128bb84146050e98b51a617c6575ab", "20dcd984f")


def test_docker_tags_become_image_refs() -> None:
    t = triage("Fine with vllm/vllm-openai:v0.17.0, slow after upgrading to vllm/vllm-openai:v0.18.0")
    assert (t.good, t.bad) == ("v0.17.0", "v0.18.0")
    assert t.images == ["vllm/vllm-openai:v0.17.0", "vllm/vllm-openai:v0.18.0"]
    assert validated_spec(t).build.kind == "image"


def test_numbers_with_thousands_separators_and_every_symptom() -> None:
    t = triage("TTFT went from 51 ms to 80 ms and GSM8K accuracy dropped from 0.94 to 0.89.\n"
               "Throughput fell from 1,921.5 tok/s to 1,490.131 tok/s.\n")
    assert {"ttft", "correctness", "throughput"} <= set(t.symptoms)
    assert t.numbers["tok_s"] == [1921.5, 1490.131]
    assert t.symptom == "ttft"  # TTFT has a probe now (issue 31): the spec follows it
    assert not any("no probe judges" in u for u in t.unknowns)


def test_non_speculative_wording_means_no_speculative_config() -> None:
    for text in ("non-spec decode of an MTP checkpoint regressed", "非投机解码变慢 (MTP 模型)",
                 "spec off: MTP model, slower", "no speculative config; MTP weights present",
                 "engine config: speculative_config=None, MTP head loaded"):
        assert triage(text).speculative is None, text
    assert triage("MTP K=2 got slower").speculative == {"method": "mtp", "num_speculative_tokens": 2}


def test_serve_and_bench_lines() -> None:
    t = triage("```\nvllm serve /models/Qwen/Qwen3-8B --tensor-parallel-size 4 --port 80 \\\n"
               "  --max-num-seqs 8 --chat-template $(rm -rf ~)\n"
               "vllm bench serve --model Qwen/Qwen3-8B --dataset-name random --random-input-len 1024 "
               "--random-output-len 256 --num-prompts 64 --port 80\n```\n")
    assert t.model == "Qwen3-8B" and t.local_model == "/models/Qwen/Qwen3-8B"
    assert t.serve_args == ["--tensor-parallel-size", "4", "--max-num-seqs", "8"]
    assert any("dropped --chat-template" in w for w in t.warnings)
    assert t.bench == {"kind": "serve", "args": ["--dataset-name", "random", "--random-input-len",
                                                 "1024", "--random-output-len", "256",
                                                 "--num-prompts", "64"]}
    assert t.hardware["tensor_parallel"] == 4


def test_regexes_are_linear_on_adversarial_input() -> None:
    nasty = ["a/" + "1" * 16000, "v" + "0." * 8000, "`" + "a1" * 8000, "|" * 16000,
             "commit " + "f" * 16000, "0," * 16000 + "tok/s", "--model " + "x/" * 8000,
             "stops at " + " " * 16000 + "1", ("after " * 4000) + "v1.2.3",
             "https://" + "a" * 30000 + " 0.1.2",
             "\n".join(" ".join(f"v0.{i}.{j} ✅" for j in range(100)) for i in range(300))]
    t0 = time.process_time()   # CPU time: a loaded machine does not make it fail
    for text in nasty:
        triage(text)
        triage(text + "\n" + text)
    assert time.process_time() - t0 < 30  # catastrophic backtracking took minutes on one of these


def test_refs_resolve_against_a_repo_by_ancestry(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6)
    repo = git.Repo(h.path)
    repo.create_tag("v0.22.1", ref=h.shas[1])
    text = (f"- v0.22.1: fine\n- nightly `{abbrev(h.shas[5])}`: regressed, capped at 128 tokens\n"
            f"- and the older nightly `{abbrev(h.shas[3])}` is just as slow\n")
    t = triage(text)
    resolve_refs(t, repo)
    assert (t.good, t.bad) == (h.shas[1], h.shas[3])  # the earliest bad by ancestry


def test_cli_writes_a_valid_spec(tmp_path: Path) -> None:
    out = tmp_path / "spec.toml"
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "triage",
                        str(CORPUS / "founding-59520-en" / "report.md"), "--write", str(out),
                        "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("search", "good", "bad", "symptoms", "model", "hardware", "speculative",
                "unknowns", "read", "compare_command"):
        assert key in doc
    assert doc["search"] == "fix"
    spec = load_spec(out)
    assert spec.range.search == "fix" and spec.range.good == "21c08ac4589"
    assert triage_json(triage(read("founding-47297-zh")))["spec"]["verdict"]["symptom"] == "any"
