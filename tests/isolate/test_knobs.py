"""knobs: parsing and applying knobs (pure), and the config bisect through the CLI on a commit
where one serve flag value caps the output (command builds, simulator servers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import write_spec
from tests.isolate.helpers import command_spec
from vllm_bisect.errors import SpecError
from vllm_bisect.isolate.knobs import KnobKind, apply, parse_knob
from vllm_bisect.sim.synth import knob_history


def test_parse_and_apply() -> None:
    env = parse_knob("VLLM_USE_FLASHINFER_SAMPLER=1,0")
    arg = parse_knob("--attention-backend=FLASH_ATTN,TRITON_ATTN")
    flag = parse_knob("--enforce-eager=-,+")
    assert env.kind is KnobKind.ENV and arg.kind is KnobKind.ARG
    assert arg.values == ("FLASH_ATTN", "TRITON_ATTN")
    for bad in ("VLLM_X", "VLLM_X=1", "--x=a,", "not a name=1,2"):
        with pytest.raises(SpecError, match="invalid knob"):
            parse_knob(bad)
    from vllm_bisect.spec import parse_spec

    spec = parse_spec({"serve": {"args": ["--attention-backend", "X", "--max-model-len", "8"],
                                 "env": {"VLLM_USE_FLASHINFER_SAMPLER": "1"}},
                       "build": {"kind": "command", "serve": "serve {port}"}})
    s = apply(spec, {env: "-", arg: "TRITON_ATTN", flag: "+"})
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in s.serve.env
    assert s.serve.args == ["--max-model-len", "8", "--attention-backend=TRITON_ATTN",
                            "--enforce-eager"]
    assert s.build.serve == "serve {port} --attention-backend=TRITON_ATTN --enforce-eager"
    assert s.measurement_key("a" * 40) != spec.measurement_key("a" * 40)


def test_config_bisect_names_the_guilty_knob(tmp_path: Path) -> None:
    h = knob_history(tmp_path / "vllm")
    spec_file = write_spec(tmp_path / "spec.toml", command_spec(h))
    cmd = [sys.executable, "-m", "vllm_bisect.cli", "knobs", "--spec", str(spec_file),
           "--commit", h.planted["knob"], "--session", str(tmp_path / "s"),
           "--cache-dir", str(tmp_path / "cache"),
           "--knob", "VLLM_USE_FLASHINFER_SAMPLER=1,0",
           "--knob", "--attention-backend=FLASH_ATTN,TRITON_ATTN",
           "--knob", "VLLM_MTP_ASYNC_SCHEDULING=-,1", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (t,) = doc["tables"]
    assert t["baseline_verdict"] == "good"
    flips = {(r["knob"], r["value"]): r["flips"] for r in t["rows"]}
    assert flips == {("VLLM_USE_FLASHINFER_SAMPLER", "0"): False,
                     ("--attention-backend", "TRITON_ATTN"): True,
                     ("VLLM_MTP_ASYNC_SCHEDULING", "1"): False}
    assert t["minimal"] == ["--attention-backend=TRITON_ATTN"]
    assert (tmp_path / "s" / "knobs.json").exists()
