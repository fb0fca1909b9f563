"""GPU state with every measurement: clocks, temperature, power, and who else uses the GPU.

Read through NVML (``nvidia-ml-py``, imported as ``pynvml``) when it is installed, else
through ``nvidia-smi``'s CSV queries, else not at all (no GPU here: ``None``, nothing fails).
A measurement gets the state read before and after its probe; when a compute process other
than the server's own (its process tree) used a GPU meanwhile, the measurement is flagged: a
latency taken beside someone else's kernels is not this commit's latency.

``serve.lock_clocks`` (opt-in) pins the SM clock for the session with ``nvidia-smi -lgc``
(to ``serve.lock_clocks_mhz``, else each GPU's default applications clock, the lowest of
them) and resets it with ``nvidia-smi -rgc`` afterwards, as GPU benchmark suites do for
stable numbers; without the permission (root) it warns and goes on unlocked.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

GPU_QUERY = "index,uuid,clocks.sm,clocks.mem,temperature.gpu,power.draw"
APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"
CSV = "--format=csv,noheader,nounits"
SMI_SET_S = 60.0  # nvidia-smi -lgc / -rgc


def _smi_set(*args: str) -> tuple[int, str]:
    """``nvidia-smi ARGS`` within ``SMI_SET_S``: its exit code and what it said."""
    try:
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=False,
                           timeout=SMI_SET_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        return -1, str(err)
    return r.returncode, (r.stdout + r.stderr).strip()


@dataclass(frozen=True)
class GpuReading:
    index: int
    uuid: str
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    temperature_c: float | None
    power_w: float | None


@dataclass(frozen=True)
class GpuProcess:
    gpu_uuid: str
    pid: int
    name: str
    used_mib: float | None


@dataclass(frozen=True)
class GpuState:
    source: str                          # "nvml" or "nvidia-smi"
    gpus: tuple[GpuReading, ...]
    processes: tuple[GpuProcess, ...]

    def foreign(self, own: set[int]) -> list[GpuProcess]:
        """Compute processes that are not ours. Without our pids (a container's server)
        every process but one is foreign when there are several."""
        if own:
            return [p for p in self.processes if p.pid not in own]
        return list(self.processes[1:]) if len(self.processes) > 1 else []

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "gpus": [asdict(g) for g in self.gpus],
                "processes": [asdict(p) for p in self.processes]}


def _num(x: str) -> float | None:
    try:
        return float(x.strip())
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in row] for row in csv.reader(io.StringIO(text)) if row]


def parse_gpus(text: str) -> tuple[GpuReading, ...]:
    """``nvidia-smi --query-gpu=index,uuid,clocks.sm,clocks.mem,temperature.gpu,power.draw
    --format=csv,noheader,nounits``"""
    out = []
    for row in _rows(text):
        if len(row) < 6 or not row[0].isdigit():
            continue
        out.append(GpuReading(int(row[0]), row[1], _num(row[2]), _num(row[3]), _num(row[4]),
                              _num(row[5])))
    return tuple(out)


def parse_apps(text: str) -> tuple[GpuProcess, ...]:
    """``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory
    --format=csv,noheader,nounits`` (empty when nothing runs)."""
    out = []
    for row in _rows(text):
        if len(row) < 4 or not row[1].isdigit():
            continue
        out.append(GpuProcess(row[0], int(row[1]), row[2], _num(row[3])))
    return tuple(out)


def _smi(args: list[str], timeout: float) -> str | None:
    try:
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                           timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def _nvml() -> GpuState | None:
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: fall back to nvidia-smi
        return None
    try:
        gpus, procs = [], []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            power: float | None
            try:
                power = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
            except pynvml.NVMLError:
                power = None
            gpus.append(GpuReading(
                i, uuid, float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)), power))
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                used = getattr(p, "usedGpuMemory", None)
                procs.append(GpuProcess(uuid, int(p.pid), _proc_name(int(p.pid)),
                                        used / 2**20 if used else None))
        return GpuState("nvml", tuple(gpus), tuple(procs))
    except pynvml.NVMLError as err:
        logger.debug("NVML: %s", err)
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _proc_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def read_state(timeout: float = 5.0) -> GpuState | None:
    """The GPUs' state now; None without NVML and nvidia-smi (or when neither answers)."""
    state = _nvml()
    if state is not None:
        return state
    if shutil.which("nvidia-smi") is None:
        return None
    gpus = _smi([f"--query-gpu={GPU_QUERY}", CSV], timeout)
    if gpus is None:
        return None
    apps = _smi([f"--query-compute-apps={APPS_QUERY}", CSV], timeout) or ""
    return GpuState("nvidia-smi", parse_gpus(gpus), parse_apps(apps))


def process_tree(pid: int | None) -> set[int]:
    """pid and its descendants (from /proc; empty when pid is None)."""
    if pid is None:
        return set()
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(children.get(p, []))
    return out


def observe(before: GpuState | None, after: GpuState | None, own: set[int]
            ) -> tuple[dict[str, Any] | None, str | None]:
    """What a measurement records: both states, and a note when another process used a GPU
    during the probe (None: no GPU state to record)."""
    if before is None and after is None:
        return None, None
    foreign: dict[int, GpuProcess] = {}
    for s in (before, after):
        if s is not None:
            foreign.update({p.pid: p for p in s.foreign(own)})
    record: dict[str, Any] = {"before": before.as_dict() if before else None,
                              "after": after.as_dict() if after else None,
                              "foreign_processes": [asdict(p) for p in foreign.values()]}
    note = None
    if foreign:
        who = ", ".join(f"pid {p.pid} {p.name or '?'}" for p in foreign.values())
        note = f"another process used the GPU during this measurement ({who}): flagged"
    return record, note


def default_clock() -> int | None:
    """The lowest default applications SM clock over the GPUs (MHz)."""
    text = _smi(["--query-gpu=clocks.default_applications.graphics", CSV], 5.0)
    vals = [v for v in (_num(r[0]) for r in _rows(text or "") if r) if v]
    return int(min(vals)) if vals else None


@contextlib.contextmanager
def locked_clocks(enabled: bool, mhz: int | None = None) -> Iterator[int | None]:
    """Pin the SM clock for the block (``nvidia-smi -lgc X,X``), reset it after (``-rgc``).
    Yields the locked clock, or None when not locked (disabled, no nvidia-smi, no
    permission)."""
    if not enabled:
        yield None
        return
    if shutil.which("nvidia-smi") is None:
        logger.warning("serve.lock_clocks: nvidia-smi is not on PATH; clocks are not locked")
        yield None
        return
    target = mhz or default_clock()
    if target is None:
        logger.warning("serve.lock_clocks: no clock to lock to (set serve.lock_clocks_mhz)")
        yield None
        return
    code, said = _smi_set("-lgc", f"{target},{target}")
    if code != 0:
        logger.warning("serve.lock_clocks: nvidia-smi -lgc failed (%s); clocks are not locked",
                       said or code)
        yield None
        return
    logger.info("SM clocks locked at %d MHz for this session", target)
    try:
        yield target
    finally:
        code, said = _smi_set("-rgc")
        if code != 0:
            logger.warning("nvidia-smi -rgc failed (%s): reset the clocks by hand", said)
