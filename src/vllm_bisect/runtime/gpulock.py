"""Per-GPU file locks: two vllm-bisect sessions on one host never use the same GPU at once.

One lock file per GPU index under the lock directory (``$VLLM_BISECT_LOCK_DIR``, else the
system temp dir, shared by every user and session on the host). The holder writes who it is
into the file (session, pid, commit), so a waiter can say which session holds the GPU. Locks
are ``flock``s: the kernel drops them when the holder dies, even on kill -9, so a crashed
session never leaves a GPU locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from vllm_bisect.errors import Cancelled

logger = logging.getLogger(__name__)


def lock_dir() -> Path:
    return Path(os.environ.get("VLLM_BISECT_LOCK_DIR") or tempfile.gettempdir())


def lock_path(gpu: int) -> Path:
    return lock_dir() / f"vllm-bisect-gpu-{gpu}.lock"


def holder(gpu: int) -> dict[str, object] | None:
    """Who holds (or last held) the GPU's lock, as written by the holder."""
    try:
        text = lock_path(gpu).read_text()
        return dict(json.loads(text)) if text.strip() else None
    except (OSError, ValueError):
        return None


def describe_holder(gpu: int) -> str:
    h = holder(gpu)
    if not h:
        return f"GPU {gpu} is in use by another process"
    return (f"GPU {gpu} is held by session {h.get('session')} (pid {h.get('pid')}, "
            f"testing {str(h.get('commit', ''))[:12]})")


def _acquire(gpu: int, cancel: threading.Event | None,
             on_wait: Callable[[str], None] | None) -> IO[str]:
    path = lock_path(gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")  # noqa: SIM115 (kept open while held)
    told = False
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fh
        except BlockingIOError:
            if not told:
                msg = describe_holder(gpu) + "; waiting for it"
                logger.info("%s", msg)
                if on_wait is not None:
                    on_wait(msg)
                told = True
            if cancel is not None and cancel.is_set():
                fh.close()
                raise Cancelled(f"cancelled while waiting for GPU {gpu}") from None
            time.sleep(0.2)


@contextlib.contextmanager
def gpu_locks(gpus: Sequence[int], *, session: str, commit: str = "",
              cancel: threading.Event | None = None,
              on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the locks of ``gpus`` (taken in index order, so two sessions cannot deadlock)."""
    held: list[IO[str]] = []
    try:
        for gpu in sorted(set(gpus)):
            fh = _acquire(gpu, cancel, on_wait)
            held.append(fh)
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"session": session, "pid": os.getpid(), "commit": commit,
                                 "since": time.time()}))
            fh.flush()
        yield
    finally:
        for fh in held:
            with contextlib.suppress(OSError):
                fh.seek(0)
                fh.truncate()
                fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()
