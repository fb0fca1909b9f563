"""Slow-loris against the live bot (issue 26): 80 idle or slow-header sockets, reconnecting
as they are closed, from one client address and from 80; /healthz and signed deliveries
from another address keep being answered (real sockets on 127.0.0.0/8)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.bot.botkit import Bot, write_config
from tests.bot.github_standin import GitHubStandIn
from tests.bot.loris import SlowLoris
from tests.helpers import history


def _probe(bot: Bot, n: int) -> list[float]:
    """n /healthz on fresh connections (as a load balancer asks), each must be 200."""
    lat = []
    for _ in range(n):
        t = time.monotonic()
        r = httpx.get(bot.url + "/healthz", timeout=60)
        lat.append(time.monotonic() - t)
        assert r.status_code == 200, (r.status_code, r.text)
    return lat


def test_healthz_and_deliveries_survive_slowloris(tmp_path: Path, gh: GitHubStandIn,
                                                  start_bot: Callable[[Path], Bot]) -> None:
    h = history(tmp_path, n_commits=3)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state", workers=0,
                                 header_timeout_s=3.0))
    port = int(bot.url.rsplit(":", 1)[1])
    for name, sources in (("one client", ["127.0.0.2"]),
                          ("80 clients", [f"127.0.0.{i}" for i in range(2, 82)])):
        with SlowLoris("127.0.0.1", port, 80, sources) as attack:
            lat = _probe(bot, 20)
            for i in range(3):   # signed deliveries (each its own body)
                assert bot.send("ping", {"zen": f"{name} {i}"}).json() == {"status": "pong"}
            lat += _probe(bot, 20)
        print(f"\nslow-loris from {name}: /healthz median {statistics.median(lat) * 1000:.0f} "
              f"ms, max {max(lat) * 1000:.0f} ms over {len(lat)}; "
              f"{attack.reconnects} attacker reconnects")
        assert attack.opened >= 80
    assert "Traceback" not in bot.output()


LORIS_PROCESS = """
import sys
from tests.bot.loris import SlowLoris
with SlowLoris("127.0.0.1", int(sys.argv[1]), 80, ["127.0.0.1"], reconnect_s=0.0) as a:
    print("ready", a.opened, flush=True)
    sys.stdin.read()
print("done", a.opened, a.reconnects, flush=True)
"""


@pytest.mark.exclusive_cpu   # the admission's head grace (0.25 s) is wall time: a loaded
# machine delayed the prober's own head past it (1 of 5 pings 503 in a full run)
def test_healthz_survives_idle_sockets_from_its_own_address(
        tmp_path: Path, gh: GitHubStandIn, start_bot: Callable[[Path], Bot]) -> None:
    """80 idle or slow-header sockets from the prober's own address (127.0.0.1), reopened at
    once as they are evicted, from a process of their own (issue 49, item 7): they share the
    prober's per-client cap, so each reopening evicts one connection of that address; the
    prober's fresh connection, its head not yet sent or not yet read (the loop is behind
    the storm), was taken for idle: 1-10 of ~80 /healthz and 0-3 signed pings answered 503.
    (A process of their own: in the test's process the attack's thread held the GIL and
    delayed the prober's head by milliseconds.)"""
    h = history(tmp_path, n_commits=3)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state", workers=0,
                                 header_timeout_s=3.0))
    port = int(bot.url.rsplit(":", 1)[1])
    attack = subprocess.Popen([sys.executable, "-c", LORIS_PROCESS, str(port)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        assert attack.stdout is not None and attack.stdin is not None
        assert attack.stdout.readline().startswith("ready")
        codes = [httpx.get(bot.url + "/healthz", timeout=60).status_code for _ in range(80)]
        pings = [bot.send("ping", {"zen": f"own address {i}"}).status_code for i in range(5)]
        out, _ = attack.communicate("", timeout=60)
    finally:
        attack.kill()
    reconnects = int(out.split()[-1])
    print(f"\nidle sockets from the prober's address: /healthz {codes.count(200)}/80 200, "
          f"pings {pings}; {reconnects} attacker reconnects")
    assert reconnects > 80
    assert codes == [200] * 80 and pings == [200] * 5, (codes, pings)
    assert "Traceback" not in bot.output()


def test_healthz_and_deliveries_survive_slow_body_loris(tmp_path: Path, gh: GitHubStandIn,
                                                        start_bot: Callable[[Path], Bot]) -> None:
    """80 sockets that send a complete signed head, then drip the body (each reopened when
    closed): from 80 addresses every /healthz was 503 (40 of 40) and signed pings too."""
    h = history(tmp_path, n_commits=3)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state", workers=0))
    port = int(bot.url.rsplit(":", 1)[1])
    for name, sources in (("one client", ["127.0.0.2"]),
                          ("80 clients", [f"127.0.0.{i}" for i in range(2, 82)])):
        with SlowLoris("127.0.0.1", port, 80, sources, body=True) as attack:
            lat = _probe(bot, 40)   # from the attack's first second on
            for i in range(3):
                assert bot.send("ping", {"zen": f"body {name} {i}"}).json() == {"status": "pong"}
        print(f"\nslow-body loris from {name}: /healthz median "
              f"{statistics.median(lat) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms over "
              f"{len(lat)}; {attack.reconnects} attacker reconnects")
        assert attack.opened >= 80
    assert "Traceback" not in bot.output()


def test_a_burst_of_deliveries_all_get_an_http_answer(tmp_path: Path, gh: GitHubStandIn,
                                                      start_bot: Callable[[Path], Bot]) -> None:
    """300 signed deliveries at once: each is answered (handled, or 503 with Retry-After when
    the bot is full), none is left with a reset or a closed socket and no answer."""
    import json
    import threading
    import uuid
    from collections import Counter

    from tests.bot.botkit import sign

    h = history(tmp_path, n_commits=3)
    bot = start_bot(write_config(tmp_path / "bot.toml", gh, h, tmp_path / "state", workers=0))
    n = 300
    got: Counter[object] = Counter()
    barrier = threading.Barrier(n)

    def deliver(i: int) -> None:
        body = json.dumps({"zen": f"burst {i}"}).encode()
        headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": str(uuid.uuid4()),
                   "X-Hub-Signature-256": sign(body), "Content-Type": "application/json"}
        barrier.wait()
        try:
            r = httpx.post(bot.url + "/webhook", content=body, headers=headers, timeout=120)
        except httpx.HTTPError as err:
            got[type(err).__name__] += 1
            return
        got[r.status_code if r.status_code != 503 else ("503", r.headers.get("retry-after"))] += 1

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"\nburst of {n}: {dict(got)}")
    assert set(got) <= {200, 202, ("503", "5")}, dict(got)
    assert sum(got.values()) == n and got[200] > 0
    assert httpx.get(bot.url + "/healthz", timeout=30).status_code == 200
    assert "Traceback" not in bot.output()
