"""The closed-loop load probe on the simulator, and bisects that follow throughput and the
MTP speed-up over generated histories."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bisect.test_driver import run_driver
from tests.conftest import ServerFactory
from tests.helpers import history, make_spec
from vllm_bisect.probes.load import LoadProbe
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import LoadSpec, ProbeSpec


def test_load_counts_server_tokens_over_wall_time(sim_server: ServerFactory) -> None:
    url = sim_server("--model", "m", "--step-ms", "10")
    one = LoadProbe(ProbeSpec(), LoadSpec(concurrency=1, requests=3, max_tokens=40)).measure(
        ServerHandle(url=url, model="m"))
    four = LoadProbe(ProbeSpec(), LoadSpec(concurrency=4, requests=8, max_tokens=40)).measure(
        ServerHandle(url=url, model="m"))
    assert one.requests == 3 and one.output_tokens == 120 and one.errors == 0
    assert four.requests == 8 and four.output_tokens == 320
    # one request decodes ~100 tok/s at 10 ms per step; four clients keep four in flight
    assert 60 < one.output_tok_s < 110
    assert four.output_tok_s > 2.5 * one.output_tok_s
    assert one.tpot_ms is not None and 9.0 < one.tpot_ms < 14.0


def test_throughput_symptom_finds_the_slow_commit(tmp_path: Path) -> None:
    # 10 ms engine steps (issue 50: at 4 ms a loaded machine's scheduling delays, a few ms a
    # step for four streams, cut a good commit's tok/s by more than the 1.5x that judges it)
    h = history(tmp_path, n_commits=10, slow_at=6, slow_factor=3.0, step_ms=10.0)
    spec = make_spec(h, probe={"max_tokens": 32, "load": {"concurrency": 4, "requests": 8,
                                                         "max_tokens": 48}},
                     verdict={"symptom": "throughput", "throughput_factor": 1.5,
                              "strategy": "threshold", "verify_samples": 0})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["itl"]
    bad = next(o for o in r.probed if o.commit == h.bad)
    assert "output tok/s at concurrency 4 <" in bad.reason


def test_mtp_speedup_symptom_finds_the_acceptance_drop(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=8, low_acceptance_at=5, step_ms=4.0)
    spec = make_spec(h, probe={"max_tokens": 32, "mtp_speedup": {"concurrency": 1, "requests": 2,
                                                                "max_tokens": 96}},
                     verdict={"symptom": "mtp-speedup", "min_mtp_speedup": 1.8,
                              "verify_samples": 0})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["mtp-speedup"]
    good = next(o for o in r.probed if o.commit == h.good)
    bad = next(o for o in r.probed if o.commit == h.bad)
    assert good.measurement and good.measurement.mtp_speedup
    assert bad.measurement and bad.measurement.mtp_speedup
    assert good.measurement.mtp_speedup > 2.2 and bad.measurement.mtp_speedup < 1.5
    assert good.measurement.mtp_off and good.measurement.mtp_off.output_tokens == 192


@pytest.mark.parametrize("verdict", [{"symptom": "throughput"},
                                     {"symptom": "mtp-speedup", "min_mtp_speedup": 1.5}])
def test_symptoms_need_their_probe(tmp_path: Path, verdict: dict[str, object]) -> None:
    from vllm_bisect.errors import SpecError

    h = history(tmp_path, n_commits=2)
    with pytest.raises(SpecError, match=r"needs \[probe\."):
        make_spec(h, verdict=verdict)


def test_load_grid_runs_every_cell_with_its_context(sim_server: ServerFactory) -> None:
    from vllm_bisect.probes.load import measure_grid

    url = sim_server("--model", "m", "--step-ms", "2", "--spec-k", "3", "--acceptance", "0.7",
                     "--seed", "7")
    grid = LoadSpec(concurrency=[1, 3], context=[64, 512], requests=2, max_tokens=24)
    cells = measure_grid(ProbeSpec(prompt="a b c d e f g"), grid, ServerHandle(url=url, model="m"))
    assert [(c.concurrency, c.context_tokens) for c in cells] == [(1, 64), (1, 512), (3, 64),
                                                                  (3, 512)]
    assert [c.prompt_tokens for c in cells] == [64, 512, 64, 512]
    # a cell never has fewer requests than clients; the tokens are the server's counts
    assert [c.requests for c in cells] == [2, 2, 3, 3]
    assert all(c.output_tokens == 24 * c.requests for c in cells)
    # each cell's acceptance comes from its own /metrics deltas (K=3, 70% per draft; a cell
    # is only ~15 verify steps, so any length in (1, K + 1] can come out of it)
    for c in cells:
        assert c.acceptance_length is not None and 1.0 < c.acceptance_length <= 4.0
        assert c.acceptance_per_position is not None and len(c.acceptance_per_position) == 3
        assert all(0.0 <= a <= 1.0 for a in c.acceptance_per_position)
    pooled = sum(c.acceptance_length or 0 for c in cells) / len(cells)
    assert 1.5 < pooled < 3.7, [c.acceptance_length for c in cells]
    with pytest.raises(ValueError, match="one cell"):
        LoadProbe(ProbeSpec(), grid)
