"""The simulator's server-level noise: each server start draws its own speed level."""

from __future__ import annotations

import random
import statistics

from tests.conftest import ServerFactory
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import ProbeSpec


def itls(url: str, n: int) -> list[float]:
    probe = DecodeProbe(ProbeSpec(max_tokens=40, requests=n, warmup=0), None)
    m = probe.measure(ServerHandle(url=url, model="sim-model"))
    return [r.itl_ms for r in m.requests if r.itl_ms]


def test_each_server_start_has_its_own_level(sim_server: ServerFactory) -> None:
    # seeded starts: the level is N(1, 0.3) from the seed, shared by every request there
    levels = {seed: max(0.2, random.Random(seed).gauss(1.0, 0.3)) for seed in (3, 11)}
    assert abs(levels[3] / levels[11] - 1) > 0.25  # these two seeds differ clearly
    med = {}
    for seed in levels:
        url = sim_server("--model", "sim-model", "--step-ms", "20", "--server-cv", "0.3",
                         "--seed", str(seed))
        xs = itls(url, 3)
        assert len(xs) == 3
        med[seed] = statistics.median(xs)
        assert max(xs) / min(xs) < 1.15   # requests on one server share its level
    want = levels[3] / levels[11]
    assert abs(med[3] / med[11] / want - 1) < 0.12


def test_no_server_cv_no_level(sim_server: ServerFactory) -> None:
    url = sim_server("--model", "sim-model", "--step-ms", "20", "--seed", "3")
    assert abs(statistics.median(itls(url, 2)) / 20.0 - 1) < 0.15
