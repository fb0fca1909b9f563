"""Time to skip and peak memory of each hostile-input case (docs/hostile-input.md).

    python3 benchmarks/hostile_input.py [--deadline 5] [--json] [--only TEXT ...]

Run from the repository root. Each case starts a hostile server on 127.0.0.1 in this process
(the tests' ``tests/builders/hostile_index.py`` and ``tests/probes/hostile_sse.py``) and runs
the client side (the wheel builder, the probe, the /health wait, isolate's package index
client) in a fresh child process; the child's wall time and peak RSS (``wait4``'s
``ru_maxrss``) are reported next to an idle child's (the same imports, nothing read). The
drip cases use ``--deadline`` as their ops deadline (the defaults are 3600 s for a wheel,
120 s for an index page, the request deadline for a completion, 10 s for /version and
``ops.startup_timeout_s`` for /health).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.builders.hostile_index import Route, RouteServer, entry, make_bomb, make_wheel  # noqa: E402
from tests.probes.hostile_sse import HostileServer  # noqa: E402

SHA = "2f3f441f8" + "1" * 31
VERSION = f"0.1.0.dev1+g{SHA[:9]}"

PRELUDE = f"""
import sys, json, time
sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "src")!r}]
from pathlib import Path
from vllm_bisect.builders.cache import ArtifactCache
from vllm_bisect.builders.wheel import WheelBuilder
from vllm_bisect.envinfo import Platform
from vllm_bisect.errors import BisectError
from vllm_bisect.isolate import pkgindex
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.runtime.process import wait_healthy
from vllm_bisect.spec import OpsSpec, ProbeSpec, WheelBuild
url, tmp, d = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
def wheel(**ops):
    b = WheelBuilder(WheelBuild(index_url=url, variant="default"), ArtifactCache(tmp / "c"),
                     tmp / "logs", platform=Platform(machine="x86_64", glibc=(2, 36)),
                     ops=OpsSpec(**ops))
    return b.prepare({SHA!r}).identity
def probe(**ops):
    m = DecodeProbe(ProbeSpec(max_tokens=8, requests=1, warmup=0), ops=OpsSpec(**ops)).measure(
        ServerHandle(url=url, model="m"))
    return f"measured, server_version={{m.server_version}}"
try:
    outcome = str(CALL)
except BisectError as e:
    outcome = f"{{type(e).__name__}}: {{e.message}}"
print(json.dumps(outcome))
"""


def child(call: str, url: str, tmp: Path, deadline: float) -> dict[str, object]:
    code = PRELUDE.replace("CALL", call)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code, url, str(tmp), str(deadline)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    outcome = json.loads(out) if out.strip() else f"exit {status}: {err[-300:]}"
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "outcome": outcome[:160]}


def wheel_route(srv: RouteServer, wheel: Path, **route: object) -> None:
    srv.routes[f"/{SHA}/{wheel.name}"] = Route(wheel.read_bytes(), **route)  # type: ignore[arg-type]
    srv.metadata(SHA, [entry(wheel.name, f"../{wheel.name}", VERSION)])


def index_case(tmp: Path, setup: Callable[[RouteServer], None], call: str,
               deadline: float) -> dict[str, object]:
    with RouteServer() as srv:
        setup(srv)
        return child(call, srv.url, tmp, deadline)


def sse_case(tmp: Path, mode: str, call: str, deadline: float) -> dict[str, object]:
    with HostileServer(mode) as url:
        return child(call, url, tmp, deadline)


def cases(tmp: Path, deadline: float, only: list[str]) -> dict[str, dict[str, object]]:
    w = make_wheel(tmp / "w", VERSION)

    def wanted(name: str) -> bool:
        return not only or any(o in name for o in only)

    bomb = make_bomb(tmp / "bomb", VERSION, 2 << 30) if wanted("2 GiB member") else w
    # 60 MiB of zeros: under the bomb rule's 64 MiB floor, over a 32M unpacked cap
    big = make_bomb(tmp / "big", VERSION, 60 << 20) if wanted("unpacked") else w
    page = b'<a href="tinydep-1.0.tar.gz">tinydep-1.0.tar.gz</a>\n'
    big_page = page * (50_000_000 // len(page))
    meta = f"/{SHA}/vllm/metadata.json"
    out: dict[str, dict[str, object]] = {}

    def add(name: str, run: Callable[[], dict[str, object]]) -> None:
        if name.startswith("idle") or wanted(name):
            out[name] = run()

    add("idle child (baseline)", lambda: index_case(tmp / "0", lambda s: None, "'idle'", deadline))
    add("wheel: 2 GiB declared, 1 byte / 2 s", lambda: index_case(
        tmp / "1", lambda s: wheel_route(s, w, drip_s=2.0, length=2 << 30),
        "wheel(download_deadline_s=d)", deadline))
    add("metadata.json body dripped (1 byte / 0.5 s)", lambda: index_case(
        tmp / "2", lambda s: s.routes.__setitem__(meta, Route(b"[", drip_s=0.5, length=10**5)),
        "wheel(index_deadline_s=d)", deadline))
    add("metadata.json headers dripped (1 byte / 0.5 s)", lambda: index_case(
        tmp / "3", lambda s: s.routes.__setitem__(meta, Route(header_drip_s=0.5)),
        "wheel(index_deadline_s=d)", deadline))
    add("completion headers dripped (1 byte / 0.5 s)", lambda: sse_case(
        tmp / "4", "headers-drip", "probe(request_deadline_s=d)", deadline))
    add("/version dripped (1 byte / 0.5 s)", lambda: sse_case(
        tmp / "5", "version-drip", "probe()", deadline))
    add("/health headers dripped (1 byte / 0.5 s)", lambda: sse_case(
        tmp / "6", "health-drip", "wait_healthy(url, lambda: None, d, tmp / 'log')", deadline))
    add("PEP 503 page dripped (1 byte / 0.5 s)", lambda: index_case(
        tmp / "7", lambda s: s.routes.__setitem__("/tinydep/", Route(page, drip_s=0.5,
                                                                     length=10**5)),
        "pkgindex.versions(url, 'tinydep', deadline_s=d)", deadline))
    add("/health 200, body dripped (1 byte / 0.5 s)", lambda: sse_case(
        tmp / "6b", "health-body-drip", "'healthy after %.2f s' % wait_healthy(url, lambda: None, d, "
        "tmp / 'log')", deadline))
    add("wheel: 2 MB holding a 2 GiB member (default caps)", lambda: index_case(
        tmp / "8", lambda s: wheel_route(s, bomb), "wheel()", deadline))
    add("wheel: 5 GiB declared (default max_wheel_size 4G)", lambda: index_case(
        tmp / "9", lambda s: wheel_route(s, w, drip_s=2.0, length=5 << 30), "wheel()", deadline))
    add("wheel: unpacks to 60 MiB, ops.max_unpacked_size 32M", lambda: index_case(
        tmp / "9b", lambda s: wheel_route(s, big), "wheel(max_unpacked_size='32M')", deadline))
    add("/version of 1 GiB", lambda: sse_case(tmp / "10", "version-huge", "probe()", deadline))
    add("PEP 503 page of 50 MB", lambda: index_case(
        tmp / "11", lambda s: s.routes.__setitem__("/tinydep/", Route(big_page)),
        "pkgindex.versions(url, 'tinydep')", deadline))
    add("control: the 50 MB page with the cap raised to 1 GiB (read whole)", lambda: index_case(
        tmp / "12", lambda s: s.routes.__setitem__("/tinydep/", Route(big_page)),
        "len(pkgindex.versions(url, 'tinydep', max_bytes=1 << 30))", deadline))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deadline", type=float, default=5.0, help="ops deadline of the drip cases")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", action="append", default=[],
                    help="run only the cases whose name holds this text (and the idle child)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hostile-bench-") as tmp:
        rows = cases(Path(tmp), args.deadline, args.only)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| case | time to outcome (s) | peak RSS (MB) | outcome |\n|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['wall_s']} | {r['peak_rss_mb']} | {r['outcome']} |")


if __name__ == "__main__":
    main()
