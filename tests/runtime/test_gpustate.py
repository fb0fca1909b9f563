"""GPU state through a stand-in ``nvidia-smi`` on PATH (no GPU here): a script that prints
nvidia-smi's CSV output (the query flags and the layout of ``--format=csv,noheader,nounits``)
and logs how it was called."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.helpers import history, make_spec
from vllm_bisect.bisect.driver import NullEvents
from vllm_bisect.run_bisect import run_bisect
from vllm_bisect.runtime.gpustate import (
    GpuProcess,
    locked_clocks,
    observe,
    parse_apps,
    parse_gpus,
    process_tree,
    read_state,
)

GPUS = ("0, GPU-3e9a7c61-5b0f-2d4e-8c1a-6f7b9d2e4a10, 1980, 2619, 34, 118.47\n"
        "1, GPU-9b2c1d7e-0a4f-6e3b-a5c8-2d1f7e9b3c66, 1410, 2619, 31, [N/A]\n")
OTHER = "GPU-3e9a7c61-5b0f-2d4e-8c1a-6f7b9d2e4a10, 424242, /usr/bin/python3, 70210\n"
SCRIPT = """#!/bin/sh
echo "$@" >> "{d}/calls.log"
case "$1" in
  --query-gpu=index,uuid,clocks.sm,clocks.mem,temperature.gpu,power.draw) cat "{d}/gpus.csv" ;;
  --query-compute-apps=gpu_uuid,pid,process_name,used_memory) cat "{d}/apps.csv" ;;
  --query-gpu=clocks.default_applications.graphics) printf '1755\\n1755\\n' ;;
  -lgc) if [ -f "{d}/deny" ]; then
          echo "Setting locked GPU clocks is not supported for GPU 00000000:18:00.0."
          echo "Treating as warning and moving on."; echo "All done."; exit 4; fi
        echo "GPU clocks set to \\"($2)\\" for GPU 00000000:18:00.0"; echo "All done." ;;
  -rgc) echo "All done." ;;
esac
"""


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "fake-smi"
    d.mkdir()
    exe = d / "nvidia-smi"
    exe.write_text(SCRIPT.format(d=d))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    (d / "gpus.csv").write_text(GPUS)
    (d / "apps.csv").write_text("")
    (d / "calls.log").write_text("")
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    return d


def calls(d: Path) -> list[str]:
    return (d / "calls.log").read_text().splitlines()


def test_parse_nvidia_smi_csv() -> None:
    g = parse_gpus(GPUS)
    assert [x.index for x in g] == [0, 1]
    assert g[0].sm_clock_mhz == 1980 and g[0].mem_clock_mhz == 2619
    assert g[0].temperature_c == 34 and g[0].power_w == pytest.approx(118.47)
    assert g[1].power_w is None  # [N/A]
    a = parse_apps(OTHER)
    assert a == (GpuProcess("GPU-3e9a7c61-5b0f-2d4e-8c1a-6f7b9d2e4a10", 424242,
                            "/usr/bin/python3", 70210.0),)
    assert parse_apps("") == ()


def test_read_state_through_nvidia_smi(smi: Path) -> None:
    (smi / "apps.csv").write_text(OTHER)
    s = read_state()
    assert s is not None and s.source == "nvidia-smi"
    assert len(s.gpus) == 2 and s.processes[0].pid == 424242
    assert s.foreign({1, 2}) == list(s.processes)
    assert s.foreign({424242}) == []


def test_no_nvidia_smi_no_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert read_state() is None
    assert observe(None, None, set()) == (None, None)
    with locked_clocks(True) as clock:
        assert clock is None


def test_observe_flags_a_foreign_process(smi: Path) -> None:
    before = read_state()
    (smi / "apps.csv").write_text(OTHER)
    after = read_state()
    record, note = observe(before, after, own={os.getpid()})
    assert record is not None and record["after"]["gpus"][0]["sm_clock_mhz"] == 1980
    assert note is not None and "pid 424242" in note
    assert observe(before, before, own={os.getpid()})[1] is None
    assert os.getpid() in process_tree(os.getpid())


def test_lock_clocks_pins_and_restores(smi: Path) -> None:
    with locked_clocks(True) as clock:
        assert clock == 1755
        assert calls(smi)[-1] == "-lgc 1755,1755"
    assert calls(smi)[-1] == "-rgc"
    with locked_clocks(True, 1500) as clock:
        assert clock == 1500
    assert calls(smi)[-2:] == ["-lgc 1500,1500", "-rgc"]
    n = len(calls(smi))
    with locked_clocks(False) as clock:
        assert clock is None
    assert len(calls(smi)) == n


def test_lock_clocks_without_permission_goes_on_unlocked(smi: Path) -> None:
    (smi / "deny").write_text("")
    with locked_clocks(True) as clock:
        assert clock is None
    assert "-rgc" not in calls(smi)


def test_a_bisect_records_gpu_state_flags_contention_and_locks_clocks(
        smi: Path, tmp_path: Path) -> None:
    (smi / "apps.csv").write_text(OTHER)
    h = history(tmp_path, n_commits=2, cap_at=2)
    spec = make_spec(h, serve={"lock_clocks": True}, verdict={"symptom": "length",
                                                             "verify_samples": 0})
    r = run_bisect(spec, tmp_path / "session", tmp_path / "cache", NullEvents())
    assert r.first_bad == h.planted["length"]
    log = calls(smi)
    assert log[1] == "-lgc 1755,1755" and log[-1] == "-rgc"  # locked for the whole session
    report = (tmp_path / "session" / "report.md").read_text()  # auto's choice, with its reason
    # (issue 26: the reason says "expected to be deterministic" until a run shows it)
    assert "Verdict strategy: `threshold` (auto: the length symptom is expected to be " \
        "deterministic" in report
    for o in r.probed:
        assert o.measurement is not None and o.measurement.gpu_state is not None
        assert o.measurement.gpu_contended
        assert any("another process used the GPU" in n for n in o.measurement.notes)
