"""Virtual scenarios with more than one regression (issue 28: one culprit per symptom, two
ITL steps in one range) for :class:`~vllm_bisect.sim.virtual.VirtualCluster`.

A :class:`StepsScenario` is a :class:`~vllm_bisect.sim.virtual.Scenario` whose mean ITL
steps up at each of ``itl_steps`` (commit index, factor): the factors multiply. A 128-token
cap may sit at ``culprit`` (``symptom = "length"``, the cluster's cap rule) or nowhere
(``cap_at = None``: ``culprit`` past the range). Everything else (noise, servers, costs) is
the cluster's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_bisect.sim.virtual import Scenario


@dataclass(frozen=True)
class StepsScenario(Scenario):
    itl_steps: tuple[tuple[int, float], ...] = ()

    def mean_itl(self, i: int) -> float:
        return 10.0 * math.prod(f for at, f in self.itl_steps if i >= at)


def steps_scenario(n: int, itl_steps: tuple[tuple[int, float], ...], *,
                   cap_at: int | None = None, cv: float = 0.0,
                   server_cv: float = 0.0) -> StepsScenario:
    """``n`` commits, no skips, no crashes: ITL steps at ``itl_steps``, a cap at ``cap_at``."""
    return StepsScenario(n=n, culprit=n + 1 if cap_at is None else cap_at,
                         unbuildable=frozenset(), symptom="length", cv=cv,
                         server_cv=server_cv, itl_steps=itl_steps)
