"""result.json's endpoint_env (bisect/endpoint_doc.py) and the report's section
(report/env_section.py): packages, VLLM_* variables and the platform side by side."""

from __future__ import annotations

from pathlib import Path

from vllm_bisect.bisect.endpoint_doc import Change, EndpointEnvDoc, env_doc
from vllm_bisect.models import EvalStatus, Evaluation
from vllm_bisect.report.env_section import env_lines


def ev(driver: str, vllm_vars: dict[str, str]) -> Evaluation:
    """An evaluation with the fingerprint every measurement records (envinfo.fingerprint)."""
    return Evaluation(commit="c" * 40, status=EvalStatus.MEASURED, environment={
        "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0", "sm": "sm_90",
                  "driver": driver}], "cuda": "12.8",
        "env": {**vllm_vars, "CUDA_VISIBLE_DEVICES": "0"}})


def test_the_document_puts_packages_variables_and_platform_side_by_side() -> None:
    doc = env_doc(({"vllm": "1", "torch": "2.9"}, {"vllm": "2", "torch": "2.10"}),
                  (ev("570.1", {"VLLM_USE_V1": "1", "VLLM_X": "a"}),
                   ev("575.2", {"VLLM_USE_V1": "1", "VLLM_X": "b"})),
                  good="a" * 40, bad="b" * 40, judged_good=False, notes=(), line="told",
                  session=Path("S"))
    assert doc is not None and doc.compared and doc.package_counts == (2, 2)
    assert Change(name="torch", good="2.9", bad="2.10") in doc.packages
    assert doc.beyond_vllm == ["torch"] and doc.deps_command == "vllm-bisect deps S"
    assert doc.vllm_vars == [Change(name="VLLM_X", good="a", bad="b")]
    assert doc.vllm_vars_same == 1   # VLLM_USE_V1; CUDA_VISIBLE_DEVICES is not a VLLM_ one
    assert doc.platform == [Change(name="driver", good="570.1", bad="575.2")]
    assert (doc.gpu, doc.cuda) == ("NVIDIA H200", "12.8")
    text = "\n".join(env_lines(doc.model_dump(mode="json")))
    assert "### Environments of the endpoints" in text
    assert "`torch` 2.9 -> 2.10" in text and "`vllm-bisect deps S`" in text
    assert "`VLLM_X` a -> b" in text and "`driver` 570.1 -> 575.2" in text


def test_without_packages_it_says_why_and_keeps_the_platform() -> None:
    doc = env_doc(None, (ev("570.1", {}), ev("570.1", {})), good="a" * 40, bad="b" * 40,
                  judged_good=True, notes=(), line=None, session=Path("S"))
    assert doc is not None and not doc.compared and doc.deps_command is None
    assert any("result cache" in n for n in doc.notes)
    text = "\n".join(env_lines(doc.model_dump(mode="json")))
    assert "(judged good)" in text and "packages: not compared" in text
    # a commit judged good is not passed off as the good endpoint (issue 42)
    assert "Environments of the endpoints" not in text
    named = "\n".join(env_lines(doc.model_dump(mode="json"), "e" * 40))
    assert f"### Environments of `{'a' * 12}` (judged good) and the bad endpoint" in named
    assert f"the good endpoint `{'e' * 12}` was not run" in named
    assert "GPU NVIDIA H200, driver 570.1, CUDA 12.8 (the same on both sides)" in text
    assert EndpointEnvDoc.model_validate_json(doc.model_dump_json()) == doc
    assert env_doc(None, (None, None), good="a", bad="b", judged_good=False, notes=(),
                   line=None, session=Path("S")) is None
