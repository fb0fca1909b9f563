"""The model of the range for a symptom a server shows or not (issue 48 item 5: deterministic
and flaky caps as likelihoods of the same engine): pure posterior checks, then a cap bisected
through `vllm-bisect run` on a generated history."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.bisect.test_changepoint_cli import run_cmd
from tests.helpers import history, make_spec, write_spec
from vllm_bisect.verdict.changepoint import Server
from vllm_bisect.verdict.changepoint_next import choose
from vllm_bisect.verdict.changepoint_rate import rate_posterior


def srv(i: int, shown: bool) -> Server:
    return Server(i, 1, 1.0 if shown else 0.0, 0.0)


def bisect_plain(n: int, culprit: int) -> list[Server]:
    """The servers of one plain bisection over a deterministic cap (one server a commit)."""
    out = [srv(-1, False), srv(n - 1, True)]
    lo, hi = -1, n - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        out.append(srv(mid, mid >= culprit))
        lo, hi = (lo, mid) if mid >= culprit else (mid, hi)
    return out


def test_a_deterministic_cap_puts_the_step_at_the_boundary() -> None:
    post = rate_posterior(30, bisect_plain(30, 17))
    j, p = post.top()
    assert post.bounds[j + 1] == 17 and post.bounds[j] == 16
    assert p > 0.5 and post.none < 0.15   # (one rate for all cannot order 4 clean, 3 capped)
    # a second server that does not show it at the last good commit settles a flake there
    more = rate_posterior(30, [*bisect_plain(30, 17), srv(16, False), srv(29, True),
                               srv(17, True)])
    assert more.top()[1] > p
    q, lo, hi = more.effect_interval()
    assert q > 0.8 and hi == 1.0 and lo < q


def test_a_flaky_cap_does_not_trust_one_server_that_looks_good() -> None:
    # the new end showed it on 2 of 3 servers: the rate is not 1, so one clean server at
    # commit 10 leaves its side in doubt, and the chooser measures it again
    servers = [srv(-1, False), srv(-1, False), srv(29, True), srv(29, False), srv(29, True),
               srv(14, True), srv(7, False), srv(10, False)]
    post = rate_posterior(30, servers)
    assert 0.1 < post.p_bad(10) < 0.9
    q, _, _ = post.effect_interval()
    assert 0.4 < q < 0.95
    nxt = choose(post, list(range(30)), 1, 0.99)
    assert nxt is not None and nxt.index in (10, 11, 12, 13, 14)


def test_ends_that_look_alike_say_no_step() -> None:
    post = rate_posterior(30, [srv(-1, False), srv(29, False), srv(-1, False),
                               srv(29, False), srv(14, False)])
    assert post.none > 0.7 and post.drift == 0.0
    with pytest.raises(ValueError, match="each end"):
        rate_posterior(30, [srv(3, True)])


def test_run_names_a_cap_with_the_model_of_the_range(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=16, cap_at=9)
    spec = write_spec(tmp_path / "s.toml", make_spec(
        h, verdict={"symptom": "length", "strategy": "changepoint"}))
    session = tmp_path / "sess"
    r = subprocess.run(run_cmd(spec, session, tmp_path / "cache"), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    assert doc["first_bad"] == h.planted["length"]
    model = doc["model"]
    assert model["p"] >= 0.99 and model["rate_before"] is not None
    assert model["effect_lo"] <= 1.0 <= model["effect_hi"] + 1e-9
    assert "of the new side's servers" in (session / "report.md").read_text()
