"""Real `vllm serve` on an NVIDIA GPU: the probe, and bisects with the command builder.

Runs only with VLLM_BISECT_GPU_TESTS=1 where `vllm` and `nvidia-smi` exist (see
docs/validation.md for the exact commands). Results are written as JSON to
$VLLM_BISECT_GPU_OUT when it is set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.config_specs import PROMPT, config_spec
from tests.helpers import write_spec

from vllm_bisect.runtime.process import LaunchPlan, free_port, run_server
from vllm_bisect.sim.config_history import NGRAM, generate_config_history

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(os.environ.get("VLLM_BISECT_GPU_TESTS") != "1"
                       or shutil.which("vllm") is None or shutil.which("nvidia-smi") is None,
                       reason="needs VLLM_BISECT_GPU_TESTS=1, vllm and an NVIDIA GPU"),
]

ROOT = Path(__file__).resolve().parents[2]
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
COMMON = ["--max-model-len", "2048", "--enforce-eager", "--gpu-memory-utilization", "0.25"]


def out_dir() -> Path | None:
    d = os.environ.get("VLLM_BISECT_GPU_OUT")
    return Path(d) if d else None


def save(name: str, data: Any) -> None:
    d = out_dir()
    if d is not None:
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(json.dumps(data, indent=2, default=str))


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = Path(os.environ.get("VLLM_BISECT_GPU_WORK", str(tmp_path_factory.mktemp("gpu"))))
    made = {"tiny": base / "tiny", "tiny128": base / "tiny128"}
    for name, path in made.items():
        if not (path / "model.safetensors").exists():
            extra = ["--max-new-tokens", "128"] if name == "tiny128" else []
            subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tiny_model.py"),
                            str(path), *extra], check=True)
    return made


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=900)


def serve_and_probe(name: str, model: Path, serve_args: list[str], probe_args: list[str],
                    logs: Path) -> dict[str, Any]:
    port = free_port()
    argv = [shutil.which("vllm") or "vllm", "serve", str(model), "--port", str(port), *COMMON,
            *serve_args]
    t0 = time.monotonic()
    with run_server(LaunchPlan(argv=argv, env=VLLM_ENV), url=f"http://127.0.0.1:{port}",
                    model=str(model), log_path=logs / f"{name}.log", timeout_s=600) as h:
        r = cli("probe", "--url", h.url, "--model", str(model), "--prompt", PROMPT,
                "--log", str(logs / f"{name}.log"), "--json", *probe_args)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    doc["startup_s"] = h.startup_s
    doc["total_s"] = time.monotonic() - t0
    doc["argv"] = argv
    return doc


def test_probe_against_real_vllm(models: dict[str, Path], tmp_path: Path) -> None:
    logs = out_dir() or tmp_path
    logs.mkdir(parents=True, exist_ok=True)
    spec_json = json.dumps(NGRAM, separators=(",", ":"))
    runs = {
        "ngram_k3": (models["tiny"], ["--speculative-config", spec_json],
                     ["--max-tokens", "64", "--requests", "3"]),
        "nospec": (models["tiny"], [], ["--max-tokens", "64", "--requests", "3"]),
        "ngram_k3_gencfg128_chat_no_max": (
            models["tiny128"], ["--speculative-config", spec_json],
            ["--endpoint", "chat", "--no-max-tokens", "--requests", "2"]),
    }
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        futures = {name: pool.submit(serve_and_probe, name, *args, logs)
                   for name, args in runs.items()}
        results = {name: f.result() for name, f in futures.items()}
    save("probe_results.json", results)
    spec, plain, cap = (results["ngram_k3"], results["nospec"],
                        results["ngram_k3_gencfg128_chat_no_max"])
    assert spec["output_tokens"] == [64, 64, 64] == plain["output_tokens"]
    assert spec["tokens_per_chunk"] == pytest.approx(64 / 17, rel=0.02)
    assert spec["chunk_itl_ms"] / spec["itl_ms"] == pytest.approx(63 / 16, rel=0.1)
    assert spec["acceptance_length"] == pytest.approx(4.0, rel=0.01)
    assert plain["tokens_per_chunk"] == pytest.approx(64 / 63, rel=0.02)
    assert plain["chunk_itl_ms"] / plain["itl_ms"] == pytest.approx(1.0, rel=0.05)
    assert plain["acceptance_length"] is None
    assert cap["output_tokens"] == [128, 128]
    assert any("generation_config" in n for n in cap["notes"])


def stable_history(base: Path) -> Any:
    """The config history, generated once per work dir so a later call can resume."""
    from vllm_bisect.sim.config_history import ConfigHistory

    meta = base / "configs.json"
    if meta.exists():
        d = json.loads(meta.read_text())
        return ConfigHistory(path=Path(d["path"]), shas=tuple(d["shas"]), planted=d["planted"])
    h = generate_config_history(base / "configs", n_commits=12, spec_removed_at=7, gen_cap_at=4)
    meta.write_text(json.dumps({"path": str(h.path), "shas": list(h.shas), "planted": h.planted}))
    return h


def test_bisect_real_vllm_both_symptoms(models: dict[str, Path], tmp_path: Path) -> None:
    base = models["tiny"].parent
    work = out_dir() or tmp_path
    work.mkdir(parents=True, exist_ok=True)
    h = stable_history(base)
    env = {**VLLM_ENV, "BASE_MODEL": str(models["tiny"])}
    procs = {}
    t0 = time.monotonic()
    for symptom in ("itl", "length"):
        spec = write_spec(base / f"{symptom}.toml",
                          config_spec(h, symptom, env, startup_timeout_s=600, requests=3))
        err = open(work / f"bisect_{symptom}.stderr.txt", "w")  # noqa: SIM115 - streamed
        procs[symptom] = (subprocess.Popen(
            [sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec), "--session",
             str(base / f"session-{symptom}"), "--json"],
            stdout=subprocess.PIPE, stderr=err, text=True), err)
    results = {}
    for symptom, (p, err) in procs.items():
        stdout, _ = p.communicate(timeout=1800)
        err.close()
        assert p.returncode == 0, (work / f"bisect_{symptom}.stderr.txt").read_text()[-3000:]
        doc = json.loads(stdout)
        doc["wall_s_process"] = time.monotonic() - t0
        doc["planted"] = h.planted[symptom]
        results[symptom] = doc
    save("bisect_results.json", {"history": list(h.shas), "planted": h.planted,
                                 "results": results})
    for symptom, doc in results.items():
        assert doc["first_bad"] == h.planted[symptom], symptom


def test_parallel_bisect_real_vllm(models: dict[str, Path], tmp_path: Path) -> None:
    """Two workers on one GPU (start-ups serialized by the start-up lock, probes overlapping),
    the itl symptom, with the culprit re-measured at the end."""
    base = models["tiny"].parent
    work = out_dir() or tmp_path
    work.mkdir(parents=True, exist_ok=True)
    h = generate_config_history(base / "configs-par", n_commits=8, spec_removed_at=5,
                                gen_cap_at=2)
    env = {**VLLM_ENV, "BASE_MODEL": str(models["tiny"])}
    spec = config_spec(h, "itl", env, startup_timeout_s=600, requests=2)
    spec = spec.with_overrides(parallel={"workers": 2}, verdict={"verify_samples": 4})
    path = write_spec(base / "par.toml", spec)
    t0 = time.monotonic()
    with open(work / "parallel_bisect.stderr.txt", "w") as err:
        p = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(path),
                            "--session", str(base / "session-par"), "--json"],
                           stdout=subprocess.PIPE, stderr=err, text=True, timeout=1800)
    assert p.returncode == 0, (work / "parallel_bisect.stderr.txt").read_text()[-3000:]
    doc = json.loads(p.stdout)
    doc["wall_s_process"] = time.monotonic() - t0
    doc["planted"] = h.planted["itl"]
    save("parallel_bisect.json", doc)
    assert doc["first_bad"] == h.planted["itl"]
    assert doc["workers"] == 2
    assert doc["verification"]["confirmed"]
