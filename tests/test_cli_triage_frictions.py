"""Triage frictions a new user met (issue 26), each through the real CLI: the printed
probe.bench agrees with the spec written, triage names the next command, and an endpoint
that fails to build for a network reason gets a hint about the network, not about endpoints."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

TTFT_WITH_BENCH = """# [Performance]: TTFT regression from v0.10.0 to v0.11.0

After upgrading to v0.11.0 the mean TTFT doubled (v0.10.0 is fine).

```
vllm bench serve --model Qwen/Qwen3-8B --dataset-name random --random-input-len 8000 --num-prompts 50
```
Mean TTFT (ms): 410 on v0.10.0, 830 on v0.11.0
"""

THROUGHPUT_WITH_BENCH = """# [Performance]: throughput regression from v0.10.0 to v0.11.0

Output token throughput dropped from 5000 tok/s on v0.10.0 to 3000 tok/s on v0.11.0.

```
vllm bench throughput --model Qwen/Qwen3-8B --dataset-name random --num-prompts 200
```
"""


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def _triage(tmp_path: Path, name: str, text: str) -> tuple[str, dict[str, object], Path]:
    report, spec = tmp_path / f"{name}.md", tmp_path / f"{name}.toml"
    report.write_text(text)
    r = cli("triage", str(report), "--write", str(spec))
    assert r.returncode == 0, r.stderr
    return r.stdout, tomllib.loads(spec.read_text()), spec


def test_printed_probe_bench_is_the_one_in_the_spec(tmp_path: Path) -> None:
    for name, text in (("ttft", TTFT_WITH_BENCH), ("tput", THROUGHPUT_WITH_BENCH)):
        out, spec, _ = _triage(tmp_path, name, text)
        probe = spec["probe"]
        assert isinstance(probe, dict)
        bench = probe.get("bench")
        printed = [ln for ln in out.splitlines() if ln.startswith("probe.bench:")]
        if bench is None:  # the TTFT report: its `vllm bench serve` is not what the spec runs
            assert not printed, out
            assert "is not in the spec: probe.bench serves only the throughput symptom" in out
        else:
            assert printed == [f"probe.bench: {bench['kind']} {' '.join(bench['args'])}"], out
    assert "bench" not in _triage(tmp_path, "t2", TTFT_WITH_BENCH)[1]["probe"]  # type: ignore[operator]
    assert "bench" in _triage(tmp_path, "p2", THROUGHPUT_WITH_BENCH)[1]["probe"]  # type: ignore[operator]


def test_triage_prints_the_run_command_for_the_spec_it_wrote(tmp_path: Path) -> None:
    out, _, spec = _triage(tmp_path, "tput", THROUGHPUT_WITH_BENCH)
    assert f"next: vllm-bisect run --spec {spec}" in out, out
    report = tmp_path / "tput.md"
    r = cli("triage", str(report))  # no --write: write the spec first, then run it
    assert r.returncode == 0, r.stderr
    assert (f"next: vllm-bisect triage {report} --write spec.toml, then vllm-bisect run "
            f"--spec spec.toml") in r.stdout, r.stdout
    bare = tmp_path / "bare.md"
    bare.write_text("# vLLM got slow\n\nIt is slower than before.\n")
    r = cli("triage", str(bare), "--write", str(tmp_path / "bare.toml"))
    assert r.returncode == 0, r.stderr
    assert "unknown:" in r.stdout
    assert (f"next: set range.good, range.bad, serve.model in {tmp_path / 'bare.toml'} (see the "
            f"unknowns above), then vllm-bisect run --spec {tmp_path / 'bare.toml'}"
            ) in r.stdout, r.stdout


def test_a_network_build_failure_says_network_not_pick_other_endpoints(tmp_path: Path) -> None:
    r = cli("sim", "history", str(tmp_path / "h"), "--commits", "8", "--cap-at", "5")
    assert r.returncode == 0, r.stderr
    spec = tmp_path / "h-spec.toml"
    # the wheel index on a port nothing listens on: every download fails for a network reason
    spec.write_text(spec.read_text().replace(
        'kind = "source"', 'kind = "wheel"\nindex_url = "http://127.0.0.1:1"'))
    run = cli("run", "--spec", str(spec), "--session", str(tmp_path / "sess"), "--cache-dir",
              str(tmp_path / "cache"))
    assert run.returncode != 0
    err = " ".join(run.stderr.split())
    assert "could not be tested" in err and "Connection refused" in err, err
    assert "failed for a network reason, not because of the commit" in err, err
    assert "check the network" in err
    assert "pick a good commit that builds and serves" not in err
    assert "pick endpoints" not in err
