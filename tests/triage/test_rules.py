"""The issue-31 grammar: report-level rules, symptoms named by words, names without an org,
hardware, and the memory / TTFT specs triage writes (each rule on its own input)."""

from __future__ import annotations

import re
from pathlib import Path

import git

from tests.helpers import history
from vllm_bisect.triage import resolve_refs, triage, validated_spec


def test_a_pr_named_as_the_culprit_resolves_to_its_merge_commit(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6)
    repo = git.Repo(h.path)
    subject = repo.commit(h.shas[4]).message.splitlines()[0]
    pr = re.search(r"\(#(\d+)\)$", subject)
    assert pr is not None
    t = triage(f"# Decode perf decrease a lot\n\n#{pr.group(1)} introduced a issue: decode "
               "token speed dropped to 10 token/s from 30 token/s.\n")
    assert t.bad == f"#{pr.group(1)}" and t.good is None
    assert any("a PR named as the culprit" in r.why for r in t.read)
    resolve_refs(t, repo)
    assert (t.good, t.bad) == (h.shas[3], h.shas[4])


def test_fix_wording_and_what_is_not_a_fix() -> None:
    t = triage("# Garbled output with vllm-ascend v0.11.0rc1 on 910B\n\nThis issue has been "
               "resolved in the latest version. Please use the latest release.\n")
    assert t.search.value == "fix" and t.good == "v0.11.0rc1" and t.bad is None
    t = triage("# [Bug] `v0.3.0` produces garbage output\n\nCan be fixed by downgrading to "
               "`v0.2.7`.\n")
    assert t.search.value == "regression" and (t.good, t.bad) == ("v0.2.7", "v0.3.0")
    assert t.symptoms == ["correctness"]
    zh = triage("## 转述\n\npre-fix main 参考 21c08ac4589。该修复合并为 commit "
                "e4294144a8ca4e57da712934dca33f89bef8fe78（#59735）。\n")
    assert zh.search.value == "fix" and zh.good == "21c08ac4589"
    assert zh.bad == "e4294144a8ca4e57da712934dca33f89bef8fe78" and zh.fixed_by == ["59735"]


def test_one_release_in_a_problem_title_and_an_improvement() -> None:
    t = triage("# [Bug]: vllm 0.12.0 fail to start Qwen3-VL-30B-A3B-Thinking\n")
    assert t.bad == "v0.12.0" and t.good is None and t.symptoms == ["crash"]
    assert t.model == "Qwen3-VL-30B-A3B-Thinking"
    t = triage("# Massive increase (~10x) in KV Cache capacity for Gemma 4 in v0.21.0\n\n"
               "| v0.20.0 | ~55k tokens |\n| v0.21.0 | ~525k tokens |\n")
    assert t.good is None and t.bad is None and t.symptoms == []
    assert any(r.what == "not a regression" for r in t.read)


def test_symptoms_named_by_words() -> None:
    assert triage("# gptoss120B is OOM on one H100 after upgrading from v0.11.2 to v0.14.1\n"
                  ).symptoms == ["memory"]
    assert "memory" in triage("- vLLM 0.2.4: `# GPU blocks: 1464`\n- vLLM 0.2.5: "
                              "`# GPU blocks: 112`\n").symptoms
    assert "memory" not in triage("vllm serve m --gpu-memory-utilization 0.9\n").symptoms
    assert triage("最近几个版本输出夹杂重复、乱码\n").symptoms == ["correctness"]
    assert triage("The mean time of output token is much larger since 0.6.4.post1.\n"
                  ).symptoms == ["itl"]
    assert triage("# ~11% long-prefill regression v0.24.0 -> v0.25.0\n").symptoms == ["ttft"]


def test_names_without_an_org_and_hardware() -> None:
    assert triage("# [Bug]: gemma 3 4b output\n\nIn v0.9.2 outputs of gemma 3 4b is wrong."
                  ).model == "gemma 3 4b"
    assert triage("# GLM4 and Qwen3 are slow\n").model is None  # a family, not a model
    assert triage('INFO: 10.0.0.1 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
                  "dtype BF16/INT8\n").model is None
    assert triage("GPUs: 2080ti 22G * 4\n").hardware["gpu"] == "RTX 2080 Ti"
    assert triage("同样的硬件910b a2\n").hardware["gpu"] == "910B"
    assert triage("on my RTX 2070 SUPER\n").hardware["gpu"] == "RTX 2070 SUPER"
    assert triage("tested on my M1 Max METAL backend\n").hardware["gpu"] == "M1 Max"
    assert triage("an A40-48Q vGPU\n").hardware["gpu"] == "A40-48Q"
    assert triage("a p4d.24xlarge instance\n").hardware["gpu"] == "p4d.24xlarge"
    assert triage("see https://github.com/noonghunna/club-3090/issues/106\n"
                  ).hardware["gpu"] is None


def test_memory_and_ttft_reports_give_valid_specs() -> None:
    t = triage("# gptoss120B is OOM on one H100 after upgrading from v0.11.2 to v0.14.1\n"
               "vllm serve openai/gpt-oss-120b\n")
    spec = validated_spec(t)
    assert spec.verdict.symptom == "memory" and spec.verdict.memory_factor == 1.1
    t = triage("# TTFT regression from v0.5.4 to v0.6.2\n\nvllm serve meta-llama/Llama-2-7b-hf\n")
    spec = validated_spec(t)
    assert spec.verdict.symptom == "ttft" and spec.probe.prompt_tokens == 2048
