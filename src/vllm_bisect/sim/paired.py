"""Paired noise for benchmarks: a server's draws from (seed, commit, how many of its servers ended).

``VLLM_SIM_PAIRED=SEED:DIR`` (set by a benchmark, never by the product) seeds an unseeded
simulator server's generator (its speed level, then every request's noise) from ``SEED``, the
commit it serves (its vLLM version and step time: one per commit of a ``sim history``) and
``n``, the number of servers of that commit that ended with a graceful stop (SIGTERM/SIGINT)
counted in ``DIR``. Two bisects of the same history with the same ``SEED`` and each its own
``DIR`` see the same noise for the n-th server of each commit, so they take the same path as
long as they choose the same commits. A server killed with SIGKILL (with the driver killed
with SIGKILL: the servers get a parent-death SIGKILL) leaves no count, so the server started
again in its place after a resume draws what the killed one drew, what the uninterrupted run's
server drew. Unset (the default): the generator is seeded by ``--seed`` or the OS, as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

ENV = "VLLM_SIM_PAIRED"


@dataclass(frozen=True)
class PairedDraw:
    """One server's place in the pairing: its seed, and the marker its graceful stop writes."""

    seed: int
    marker: Path

    def ended(self) -> None:
        """Count this server as ended (a graceful stop): the commit's next server draws anew."""
        try:
            self.marker.touch()
        except OSError as err:
            logger.warning("paired noise: cannot write %s: %s", self.marker, err)


def paired_draw(commit_key: str, env: dict[str, str] | None = None) -> PairedDraw | None:
    """The draw of a server of ``commit_key`` under ``VLLM_SIM_PAIRED``; None when unset."""
    value = (os.environ if env is None else env).get(ENV, "")
    if not value:
        return None
    seed, _, where = value.partition(":")
    base = Path(where)
    base.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(commit_key.encode()).hexdigest()[:16]
    n = sum(1 for _ in base.glob(f"{key}.*"))
    digest = hashlib.sha256(f"{seed}|{key}|{n}".encode()).digest()
    return PairedDraw(seed=int.from_bytes(digest[:8], "big"), marker=base / f"{key}.{n}")
