"""The Ray executor against a real local Ray cluster (``ray start --head`` on 127.0.0.1,
with fake GPUs and a custom resource), bisecting generated histories on the simulator."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bisect.test_parallel import session_processes
from tests.builders.test_command import sim_env
from tests.config_specs import config_spec
from tests.conftest import restore_sigint
from tests.helpers import history, make_spec
from vllm_bisect.bisect.driver import NullEvents
from vllm_bisect.bisect.measurement.ray_executor import RayExecutor
from vllm_bisect.errors import SpecError
from vllm_bisect.models import EvalStatus
from vllm_bisect.run_bisect import run_bisect
from vllm_bisect.runtime.process import free_port
from vllm_bisect.sim.config_history import generate_config_history

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A head node with 4 fake GPUs and 2 units of "sm_121" (a GB10 stand-in)."""
    exe = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    port = free_port()
    tmp = tmp_path_factory.mktemp("ray")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")  # a throwaway cluster on loopback
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        subprocess.run([exe, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                        "--num-cpus=2", "--num-gpus=4", '--resources={"sm_121": 2}',
                        "--include-dashboard=false", "--disable-usage-stats",
                        f"--temp-dir={tmp}"], check=True, capture_output=True, timeout=120,
                       preexec_fn=restore_sigint)  # ray.cancel is a SIGINT in the worker
        try:
            yield f"127.0.0.1:{port}"
        finally:
            subprocess.run([exe, "stop", "--force"], capture_output=True, timeout=120)


def test_bisect_through_ray_lands_on_the_platform_resource(tmp_path: Path, cluster: str) -> None:
    h = history(tmp_path, n_commits=20, cap_at=13)
    spec = make_spec(h, parallel={"executor": "ray", "ray_address": cluster,
                                  "ray_resources": {"sm_121": 1}, "gpus_per_probe": 1})
    result = run_bisect(spec, tmp_path / "session", tmp_path / "cache", NullEvents())
    assert result.first_bad == h.planted["length"]
    assert result.workers == 2  # two units of sm_121 on the cluster, one per probe
    assert result.rounds <= 3 + 1  # ceil(log3 20) + 1
    envs = [ev.environment for ev in result.evaluations.values()]
    assert all(e.get("ray_node") for e in envs)
    gpus = {e["env"].get("CUDA_VISIBLE_DEVICES") for e in envs}  # type: ignore[union-attr]
    assert gpus and gpus <= {"0", "1", "2", "3"}
    logs = list((tmp_path / "session" / "logs").glob("serve-*.log"))
    assert len(logs) >= len(result.evaluations) - 1  # logs came back from the workers
    data = json.loads((tmp_path / "session" / "result.json").read_text())
    assert data["workers"] == 2 and data["rounds"] == result.rounds


def test_one_matching_worker_still_runs_on_ray(tmp_path: Path, cluster: str) -> None:
    """Room for one probe only (both units of sm_121 per probe): one Ray worker, not a
    fall-back to local execution."""
    h = history(tmp_path, n_commits=4, cap_at=2)
    spec = make_spec(h, parallel={"executor": "ray", "ray_address": cluster,
                                  "ray_resources": {"sm_121": 2}},
                     verdict={"verify_samples": 0})
    result = run_bisect(spec, tmp_path / "session", tmp_path / "cache", NullEvents())
    assert result.first_bad == h.planted["length"] and result.workers == 1
    assert all(ev.environment.get("ray_node") for ev in result.evaluations.values())


def test_a_resource_no_node_has_is_a_clear_error(tmp_path: Path, cluster: str) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = make_spec(h, parallel={"executor": "ray", "ray_address": cluster,
                                  "ray_resources": {"arch_aarch64": 1}})
    with pytest.raises(SpecError, match="no node of the Ray cluster has 1 arch_aarch64"):
        RayExecutor(spec, tmp_path / "s", tmp_path / "c", "sid")


def test_a_lost_worker_is_a_retried_evaluation(tmp_path: Path, cluster: str) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=2)
    marker = tmp_path / "worker-killed-once"
    spec = config_spec(h, "itl", sim_env(tmp_path), startup_timeout_s=30)
    # the serve command kills the Ray worker that launched it, the first time only
    kill_once = f"if [ ! -e {marker} ]; then touch {marker}; kill -9 $PPID; sleep 30; fi; "
    spec = spec.with_overrides(build={"serve": kill_once + "sh serve.sh {port}"},
                               parallel={"executor": "ray", "ray_address": cluster})
    ex = RayExecutor(spec, tmp_path / "session", tmp_path / "cache", "sid")
    try:
        ex.submit(h.bad)
        done = []
        while not done:
            done = ex.wait(timeout=120)
        assert marker.exists()
        assert done[0].evaluation.status is EvalStatus.MEASURED, done[0].evaluation.reason
    finally:
        ex.close()


def test_cancel_stops_a_ray_task(tmp_path: Path, cluster: str) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=2)
    spec = config_spec(h, "itl", {**sim_env(tmp_path), "VLLM_SIM_STARTUP_S": "120"},
                       startup_timeout_s=300)
    spec = spec.with_overrides(parallel={"executor": "ray", "ray_address": cluster})
    ex = RayExecutor(spec, tmp_path / "session", tmp_path / "cache", "cancel-sid")
    try:
        task = ex.submit(h.bad)
        deadline = time.monotonic() + 60
        while not session_processes("cancel-sid"):  # the server is starting (for 120 s)
            assert time.monotonic() < deadline and ex.wait(timeout=0.2) == []
        ex.cancel(task)
        (done,) = ex.wait(timeout=180)   # (a loaded machine: 60 s was seen to pass)
        assert done.cancelled, (done.evaluation.status, done.evaluation.reason)
        # torn down, not left behind (Ray may report the cancel before the worker's teardown
        # has ended: a loaded machine gets a bounded wait, never a left server)
        deadline = time.monotonic() + 60
        while session_processes("cancel-sid") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert session_processes("cancel-sid") == []
    finally:
        ex.close()
        for pid in session_processes("cancel-sid"):  # a failed test leaves no server behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
