"""A session measures on one kind of GPU.

A server's levels (ITL, TTFT, throughput) are the GPU's as much as the commit's: an H100 and
an H200 differ by more than most regressions. Every measurement keeps the GPUs it ran on
(``Evaluation.environment``, :func:`~vllm_bisect.envinfo.fingerprint`), so:

- a session resumed on a machine with other GPUs than its servers ran on is refused before
  anything runs (:func:`check_session`): one model of the range over two GPUs' levels would
  read the change of GPU as a step and name a wrong commit;
- the result cache, shared by sessions, hands a measurement only to a run on the GPUs it was
  made on (:func:`same_device`): another machine's is measured again, not reused.

Where the servers do not run on this machine (an already-running URL, a Ray cluster) the GPUs
this machine has say nothing about them, and nothing is compared. Measurements that recorded
no GPUs (older journals) are compared with nothing either.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from vllm_bisect.envinfo import detect
from vllm_bisect.errors import SessionError
from vllm_bisect.models import Evaluation
from vllm_bisect.spec import ArtifactKind, BisectSpec, ExecutorKind

Device = tuple[str, ...]   # the GPUs' names, sorted ("NVIDIA H100 80GB HBM3", ...); () none


def device_of(environment: Mapping[str, object]) -> Device | None:
    """The GPUs a measurement recorded (None: it recorded none, neither GPUs nor "none")."""
    gpus = environment.get("gpus")
    if gpus == "none":
        return ()
    if not isinstance(gpus, list):
        return None
    return tuple(sorted(str(g.get("name", "?")) for g in gpus if isinstance(g, dict)))


def this_machine() -> Device:
    return tuple(sorted(g.name for g in detect().gpus))


def describe(device: Device) -> str:
    """``1x NVIDIA H100 80GB HBM3`` / ``2x NVIDIA H200`` / ``no GPU``."""
    if not device:
        return "no GPU"
    return ", ".join(f"{n}x {name}" for name, n in sorted(Counter(device).items()))


def compared(spec: BisectSpec) -> bool:
    """Whether the servers run here, so that this machine's GPUs are theirs."""
    return spec.build.kind != ArtifactKind.URL and spec.parallel.executor == ExecutorKind.LOCAL


def same_device(ev: Evaluation, here: Device | None) -> bool:
    """Whether ``ev`` may stand for a measurement made now (``here``: this machine's GPUs;
    None: not compared)."""
    if here is None or ev.measurement is None:
        return True
    was = device_of(ev.environment)
    return was is None or was == here


def check_session(history: Iterable[tuple[str, Evaluation]], here: Device | None,
                  session: Path) -> None:
    """Refuse a session whose servers ran on other GPUs than ``here``."""
    if here is None:
        return
    others = Counter(d for _, ev in history if ev.measurement is not None
                     and (d := device_of(ev.environment)) is not None and d != here)
    if not others:
        return
    was, n = others.most_common(1)[0]
    raise SessionError(
        f"session {session} measured {n} server{'s' if n != 1 else ''} on {describe(was)}, "
        f"and this machine has {describe(here)}: levels from two kinds of GPU are not one "
        "range's, and the change of GPU would read as a regression",
        hint=f"resume it on a machine with {describe(was)}, or measure afresh here: another "
             f"--session, or move {session} aside (measurements from other GPUs are not taken "
             "from the cache)")
