"""Real MTP on real `vllm serve` (issue 16): scripts/gpu_mtp_run.py's stages on an NVIDIA GPU.

Runs only with VLLM_BISECT_GPU_TESTS=1 where `vllm` and `nvidia-smi` exist. The work directory
is $VLLM_BISECT_GPU_WORK (default: a temp dir), so a second run resumes the finished stages;
results go to $VLLM_BISECT_GPU_OUT/results.tgz when it is set (docs/validation.md, (d)).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(os.environ.get("VLLM_BISECT_GPU_TESTS") != "1"
                       or shutil.which("vllm") is None or shutil.which("nvidia-smi") is None,
                       reason="needs VLLM_BISECT_GPU_TESTS=1, vllm and an NVIDIA GPU"),
]

ROOT = Path(__file__).resolve().parents[2]


def test_mtp_probe_sized_prompts_and_sweep(tmp_path: Path) -> None:
    work = Path(os.environ.get("VLLM_BISECT_GPU_WORK", tmp_path / "work"))
    out = Path(os.environ.get("VLLM_BISECT_GPU_OUT", tmp_path / "out"))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_mtp_run.py"), str(work),
                        str(out), "--only", "env,model,a,sweep", "--budget-s", "1500"],
                       timeout=1600)
    assert r.returncode == 0
    res = work / "res"
    assert not (res / "a.failed").exists(), (res / "a.failed").read_text()
    a = json.loads((res / "A.json").read_text())
    per_pos = a["decode"]["acceptance_per_position"]
    assert len(per_pos) == 3 and per_pos[0] > per_pos[1] > per_pos[2] > 0
    assert a["decode"]["chunk_itl_ms"] > 1.5 * a["decode"]["itl_ms"]
    for v in a["sized_prompts"].values():
        assert v["prompt_tokens_per_request"] == [v["prompt_tokens"]] * 2
    sweep = json.loads((res / "sweep" / "sweep.json").read_text())
    assert len(sweep["rows"]) == 6 and all(x["off_tok_s"] and x["on_tok_s"] for x in sweep["rows"])
