"""``explain`` through the real CLI on the simulator: a synthetic history with a planted
kernel-level change, bisected, then explained."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.explain.report_section import explain_lines


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=600)


ITL = {"symptom": "itl", "itl_factor": 1.5, "strategy": "threshold"}


def new_kernel_history(tmp_path: Path, n_commits: int, kernel_at: int) -> tuple[Any, Path]:
    """A history whose commit ``kernel_at`` adds a decode-step kernel (every commit has
    --profiler-config), and an ITL spec for it."""
    h = history(tmp_path, n_commits=n_commits, kernel_at=kernel_at, kernel_change="new",
                kernel_name="_rms_norm_gated_kernel", kernel_effect=1.0, step_ms=10.0,
                profiler_config_from=0)
    spec = write_spec(tmp_path / "spec.toml", make_spec(h, verdict=ITL,
                                                        probe={"max_tokens": 60, "requests": 3}))
    return h, spec


def test_bisect_then_explain_names_the_new_kernel(tmp_path: Path) -> None:
    h, spec = new_kernel_history(tmp_path, n_commits=6, kernel_at=4)
    s, c = str(tmp_path / "s"), str(tmp_path / "c")
    r = cli("run", "--spec", str(spec), "--session", s, "--cache-dir", c)
    assert r.returncode == 0, r.stderr
    assert f"vllm-bisect explain {s}" in r.stderr  # offered for an itl culprit
    assert json.loads((tmp_path / "s" / "result.json").read_text())["first_bad"] \
        == h.planted["kernel"]
    r = cli("explain", s, "--cache-dir", c, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["culprit"] == h.planted["kernel"] and doc["server_starts"] == 4
    # issue 50, no long silence: each profiled server's steps on stderr (a line a server
    # came before; a real one takes a minute to start and as long to write its trace)
    for step in ("preparing artifact", "starting server", "profiler on", "profiler off",
                 "reading its trace"):
        assert r.stderr.count(step) == doc["server_starts"], (step, r.stderr)
    assert doc["profiler"]["culprit"].startswith("--profiler-config")
    top = doc["deltas"][0]
    assert (top["key"], top["kind"]) == ("kernel:_rms_norm_gated_kernel", "new")
    # every other kernel stayed within the run-to-run spread
    assert [d["key"] for d in doc["deltas"] if d["key"].startswith("kernel:")] == [top["key"]]
    # K = 3 drafts: 1 to 4 tokens per decode step (warmup 0: the window's tokens are known)
    assert all(1.0 < t <= 4.0 for side in doc["tokens_per_step"].values() for t in side)
    launches = next(d for d in doc["totals"] if d["key"] == "step:launches")
    assert launches["culprit"] - launches["parent"] == 1.0
    for side in ("parent", "culprit"):
        assert len(doc["traces"][side]) == 2
        # torch_profiler_use_gzip=false (declared by the simulator's ProfilerConfig)
        assert all((tmp_path / "s" / p).name.endswith(".pt.trace.json")
                   for p in doc["traces"][side])
    assert doc["environment"]["packages"] == [{"name": "vllm", "parent": doc["environment"][
        "packages"][0]["parent"], "culprit": doc["environment"]["packages"][0]["culprit"]}]
    assert doc["environment"]["beyond_vllm"] == []
    report = (tmp_path / "s" / "report.md").read_text()
    assert "### Why: the culprit's profile against its parent's" in report
    assert "| GPU busy per output token |" in report
    assert "`_rms_norm_gated_kernel`" in report and "explain/deltas.svg" in report
    assert json.loads((tmp_path / "s" / "result.json").read_text())["explain"]["deltas"]
    assert "<svg" in (tmp_path / "s" / "explain" / "deltas.svg").read_text()


def test_profile_at_the_end_of_run_finds_a_host_gap_through_the_env_variable(
        tmp_path: Path) -> None:
    # no commit has --profiler-config: the older VLLM_TORCH_PROFILER_DIR switch is used
    h = history(tmp_path, n_commits=4, kernel_at=2, kernel_change="host-gap",
                kernel_effect=1.0, step_ms=10.0)
    spec = write_spec(tmp_path / "spec.toml", make_spec(
        h, verdict=ITL, probe={"max_tokens": 60, "requests": 3}, explain={"profile": True}))
    s = str(tmp_path / "s")
    r = cli("run", "--spec", str(spec), "--session", s, "--cache-dir", str(tmp_path / "c"),
            "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["first_bad"] == h.planted["kernel"]
    ex = doc["explain"]
    # the folder the traces went to, from the session (issue 50: a literal DIR before)
    assert ex["profiler"]["culprit"] == "VLLM_TORCH_PROFILER_DIR=explain/traces/culprit-2"
    assert ex["deltas"][0]["key"] == "step:gpu_idle" and ex["deltas"][0]["kind"] == "slower"
    assert not any(d["key"].startswith("kernel:") for d in ex["deltas"])


def test_explain_outside_a_session_is_clear(tmp_path: Path) -> None:
    r = cli("explain", str(tmp_path))
    assert r.returncode == 2
    assert "is not a bisect session" in r.stderr and "vllm-bisect run" in r.stderr


def test_explain_a_named_commit_without_a_bisect(tmp_path: Path) -> None:
    # --spec FILE --culprit REF: no bisect session needed (the GPU script explains planted
    # commits this way); the traces and explain.json go into the directory it names
    h, spec = new_kernel_history(tmp_path, n_commits=4, kernel_at=2)
    s = tmp_path / "new" / "exp"
    r = cli("explain", str(s), "--spec", str(spec), "--cache-dir", str(tmp_path / "c"))
    assert r.returncode == 2 and "--culprit" in r.stderr and not s.exists()
    r = cli("explain", str(s), "--spec", str(spec), "--culprit", h.planted["kernel"][:10],
            "--cache-dir", str(tmp_path / "c"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["culprit"] == h.planted["kernel"] and doc["server_starts"] == 4
    # issue 50, no long silence: each profiled server's steps on stderr (a line a server
    # came before; a real one takes a minute to start and as long to write its trace)
    for step in ("preparing artifact", "starting server", "profiler on", "profiler off",
                 "reading its trace"):
        assert r.stderr.count(step) == doc["server_starts"], (step, r.stderr)
    assert doc["deltas"][0]["key"] == "kernel:_rms_norm_gated_kernel"
    assert json.loads((s / "explain.json").read_text())["culprit"] == h.planted["kernel"]


def test_an_interrupted_explain_keeps_the_servers_it_profiled(tmp_path: Path) -> None:
    # Ctrl-C after the first profiled server: the next explain starts only the other three
    h, spec = new_kernel_history(tmp_path, n_commits=4, kernel_at=2)
    s = tmp_path / "exp"
    argv = [sys.executable, "-m", "vllm_bisect.cli", "explain", str(s), "--spec", str(spec),
            "--culprit", h.planted["kernel"], "--cache-dir", str(tmp_path / "c"), "--json"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = s / "explain" / "servers" / "parent-1.json"
    for _ in range(1200):  # a bounded wait for the first server's numbers, not a threshold
        if first.exists() or p.poll() is not None:
            break
        time.sleep(0.25)
    assert first.exists(), p.communicate(timeout=60)[1]
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=120)
    r = cli(*argv[3:])
    assert r.returncode == 0, r.stderr
    assert "server 1/2: kept from an earlier run" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["servers_kept"] >= 1 and doc["server_starts"] == 4 - doc["servers_kept"]
    assert doc["deltas"][0]["key"] == "kernel:_rms_norm_gated_kernel"


def test_two_setups_of_one_commit_mtp_on_against_off(tmp_path: Path) -> None:
    # --against: the same commit under two specs (here MTP on, then off), not against its
    # parent; the report says which setup each column is
    h = history(tmp_path, n_commits=3, step_ms=10.0, profiler_config_from=0)
    # a warm-up request: it runs before /start_profile, so the window holds the measured
    # requests only and MTP off reads exactly 1 token per decode step
    probe = {"max_tokens": 60, "requests": 2, "warmup": 1}
    on = write_spec(tmp_path / "on.toml", make_spec(h, verdict=ITL, probe=probe))
    off_spec = make_spec(h, verdict=ITL, probe=probe)
    off_spec = off_spec.model_copy(update={"serve": off_spec.serve.model_copy(
        update={"speculative": None})})
    off = write_spec(tmp_path / "off.toml", off_spec)
    s = tmp_path / "exp"
    r = cli("explain", str(s), "--spec", str(on), "--against", str(tmp_path / "typo.toml"),
            "--culprit", h.bad)
    assert r.returncode == 2 and "--against spec" in r.stderr and "Traceback" not in r.stderr
    assert not s.exists()  # a usage error leaves nothing behind
    argv = ["explain", str(s), "--spec", str(on), "--against", str(off), "--culprit", h.bad,
            "--cache-dir", str(tmp_path / "c"), "--json"]
    r = cli(*argv)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["culprit"] == doc["parent"] == h.bad and doc["server_starts"] == 4
    assert doc["setups"]["parent"]["speculative"]["method"] == "mtp"
    assert doc["setups"]["culprit"]["speculative"] is None
    on_tps, off_tps = (doc["tokens_per_step"][side] for side in ("parent", "culprit"))
    assert all(t > 1.0 for t in on_tps) and all(t == 1.0 for t in off_tps)  # drafts accepted
    lines = "\n".join(explain_lines(doc))
    assert "### Why: one commit's profile under two setups" in lines
    assert "- setup B: `vllm serve" in lines and "no speculative decoding" in lines
    assert "| per decode step | setup A | setup B | change |" in lines
    # kept servers belong to their setup: run again, all four are kept, none mixed up
    r = cli(*argv)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["servers_kept"] == 4
    # the same directory for a commit-against-parent explain keeps nothing of the above
    r = cli(*argv[:4], *argv[6:])
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    # (its culprit side is this commit under the first setup; the kept one was the second)
    assert again["parent"] != again["culprit"] and again["servers_kept"] == 0
    text = (s / "explain.json").read_text()
    assert json.loads(text)["setups"] is None


def test_rejected_drafts_are_the_answer_when_no_kernel_moved(tmp_path: Path) -> None:
    # the culprit keeps every kernel of a decode step but its drafts are mostly rejected
    # (acceptance 0.8 -> 0.1): per step nothing moves, per output token everything does.
    # Real vLLM showed exactly this (docs/validation.md (m), the spec history's plant).
    h = history(tmp_path, n_commits=3, low_acceptance_at=3, step_ms=10.0,
                profiler_config_from=0)
    probe = {"max_tokens": 60, "requests": 2, "warmup": 1}
    spec = write_spec(tmp_path / "spec.toml", make_spec(h, verdict=ITL, probe=probe))
    r = cli("explain", str(tmp_path / "s"), "--spec", str(spec), "--culprit", h.bad,
            "--cache-dir", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "s" / "explain.json").read_text())
    out = next(d for d in doc["totals"] if d["key"] == "step:output_tokens")
    assert out["beyond"] and out["kind"] == "fewer" and out["culprit"] < 1.5 < out["parent"]
    assert not any(d["key"].startswith("kernel:") for d in doc["deltas"])
    assert "Largest: **fewer output tokens per decode step**" in r.stdout


def test_eager_against_cuda_graphs_fewer_launch_calls_same_kernels(tmp_path: Path) -> None:
    # the simulator, like vLLM, captures CUDA graphs unless --enforce-eager: the same
    # kernels, one launch call for the captured ones (real vLLM also fused kernels under
    # torch.compile, docs/validation.md (m); the simulator keeps its kernel table)
    h = history(tmp_path, n_commits=2, step_ms=10.0, profiler_config_from=0)
    probe = {"max_tokens": 40, "requests": 1, "warmup": 1}
    graphs = make_spec(h, verdict=ITL, probe=probe)
    eager = graphs.model_copy(update={"serve": graphs.serve.model_copy(
        update={"args": [*graphs.serve.args, "--enforce-eager"]})})
    r = cli("explain", str(tmp_path / "s"), "--spec", str(write_spec(tmp_path / "e.toml", eager)),
            "--against", str(write_spec(tmp_path / "g.toml", graphs)), "--culprit", h.bad,
            "--cache-dir", str(tmp_path / "c"), "--json")
    assert r.returncode == 0, r.stderr
    totals = {d["key"]: d for d in json.loads(r.stdout)["totals"]}
    calls, kernels = totals["step:launch_calls"], totals["step:launches"]
    assert calls["beyond"] and calls["kind"] == "fewer" and calls["culprit"] == 2.0
    assert kernels["parent"] == kernels["culprit"] == calls["parent"]  # eager: one call each
    assert totals["step:host"]["culprit"] < totals["step:host"]["parent"]
