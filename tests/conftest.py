"""Shared fixtures: real simulator servers, real git histories, an isolated cache."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from vllm_bisect.errors import PortTaken
from vllm_bisect.net import tls_context
from vllm_bisect.runtime.ports import Ownership, check_port, free_port

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.25.1"

# The suite starts hundreds of Pythons (the CLI, each simulated `vllm serve`, each build's
# helpers). With PYTHONDONTWRITEBYTECODE set (some CI and sandbox images set it) each of them
# compiled every module of the tool it imported from source: ~0.2 s of CPU for the CLI, ~0.1 s
# for a server start. The test run (the pytest-xdist controller, whose workers and their
# children inherit its environment) lets them write their bytecode as Python does by default
# (__pycache__ beside the sources, git-ignored). A PYTHONPYCACHEPREFIX instead would also
# compile the standard library and every dependency anew once per run (~1.5 s per process
# until warm), which costs more than it saves.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


# The order test files start in under `-n 4 --dist loadfile` (each worker takes the next file
# when it is done with one): the files holding a test of a minute or more first, so none of
# them is what the run waits on at its end; the files of exclusive_cpu tests last, so their
# gate (no test beside them) does not hold three workers idle while a long test elsewhere
# ends. Everything else keeps pytest's order.
SLOW_FIRST = ("tests/test_readme.py", "tests/bisect/test_hook_parity.py",
              "tests/bisect/test_multi_cli.py", "tests/builders/test_command.py",
              "tests/probes/test_served.py", "tests/verdict/test_symptoms.py")


def pytest_configure(config: pytest.Config) -> None:
    """Keep that order: pytest-xdist (3.x) otherwise hands out the files by their number of
    tests, most first (``--loadscope-reorder``, its default), which put the one-minute tests'
    files mid-run and the exclusive_cpu files before them: each of those then waited for
    every running test to end (measured with 8 workers: two windows of ~60 s with one
    worker busy and the others held at the gate)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.cpu_share import MARKER

    root = Path(str(config.rootpath))
    exclusive = {item.path for item in items if item.get_closest_marker(MARKER) is not None}

    def rank(item: pytest.Item) -> int:
        rel = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        if rel in SLOW_FIRST:
            return SLOW_FIRST.index(rel) - len(SLOW_FIRST)
        return 1 if item.path in exclusive else 0

    items.sort(key=rank)   # (stable: the order within a file and among the rest is kept)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test marked exclusive_cpu runs alone within the test run (tests/cpu_share.py)."""
    from tests.cpu_share import MARKER, cpu_share

    with cpu_share(item.get_closest_marker(MARKER) is not None):
        yield


@pytest.fixture(scope="session", autouse=True)
def _locks_per_xdist_worker() -> None:
    """Server start-ups are serialized host-wide (one lock per set of GPUs, meant for real
    GPUs); the simulator needs none of that between two pytest-xdist workers, which would
    otherwise wait on each other's start-ups. Each worker gets its own lock directory (the
    child processes it starts inherit it), as if each were another host."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        d = Path(tempfile.gettempdir()) / f"vllm-bisect-test-locks-{os.getpid()}-{worker}"
        d.mkdir(parents=True, exist_ok=True)
        os.environ["VLLM_BISECT_LOCK_DIR"] = str(d)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BISECT_CACHE_DIR", str(tmp_path / "cache"))


def wait_port(url: str, proc: subprocess.Popen[bytes], timeout: float = 15.0,
              path: str = "/health", ok: tuple[int, ...] = (200, 404)) -> None:
    """Wait until ``proc`` answers ``url + path`` with a status in ``ok``: an answer from
    another program that holds the port counts for nothing (``proc`` must lead its own
    session: start_new_session=True). PortTaken when ``proc`` exits while another process
    holds its port."""
    port = int(url.rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if check_port(port, proc.pid).ownership is Ownership.OTHER:
                raise PortTaken(f"port {port} was taken by another process")
            raise RuntimeError(f"server exited: {proc.stdout.read() if proc.stdout else ''!r}")
        try:
            # one TLS context for every poll: httpx.get makes a new one each call (~40 ms
            # of CPU loading the CA bundle), a core's worth at one poll per 50 ms
            if httpx.get(url + path, timeout=1.0, verify=tls_context()).status_code in ok and \
                    check_port(port, proc.pid).ownership is not Ownership.OTHER:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def start_on_free_port(argv: Callable[[int], list[str]], *, timeout: float = 15.0,
                       path: str = "/health", ok: tuple[int, ...] = (200, 404), **popen: Any
                       ) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``argv(port)`` on a free port and wait for it (:func:`wait_port`); on another
    port when a server of another test took that one first (free_port() hands the same port
    to two askers)."""
    for attempt in range(3):
        port = free_port()
        proc = subprocess.Popen(argv(port), start_new_session=True, **popen)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_port(url, proc, timeout, path, ok)
            return proc, url
        except PortTaken:
            if attempt == 2:
                raise
        except BaseException:
            stop(proc)
            raise
    raise AssertionError("unreachable")


@contextmanager
def closed_port() -> Iterator[int]:
    """A port that refuses connections for as long as the block runs: bound, never listening,
    so no other test's server can take it (a free_port() may be taken once it is handed out)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


ServerFactory = Callable[..., str]


def restore_sigint() -> None:
    """preexec_fn for children of the tests: default SIGINT even when pytest itself was
    started with it ignored (`pytest &` from a script), so Ctrl-C and ray.cancel work."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Terminate a child; kill it if it lingers."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def _servers(prefix: list[str]) -> Iterator[Callable[[list[str]], str]]:
    """Start `python -m vllm_bisect.sim PREFIX... --port P ARGS` servers; stop them after."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str]) -> str:
        proc, url = start_on_free_port(
            lambda port: [sys.executable, "-m", "vllm_bisect.sim", *prefix, "--port", str(port),
                          *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=restore_sigint,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        procs.append(proc)
        return url

    try:
        yield start
    finally:
        for p in procs:
            stop(p)


@pytest.fixture
def sim_server() -> Iterator[ServerFactory]:
    """Start `python -m vllm_bisect.sim serve ARGS` on a free port; returns its URL."""
    with _servers(["serve"]) as start:
        yield lambda *args: start(list(args))


@pytest.fixture
def replay_server() -> Iterator[ServerFactory]:
    """Start `python -m vllm_bisect.sim replay FIXTURE ARGS`; returns its URL."""
    with _servers(["replay"]) as start:
        yield lambda transcript, *args: start([str(FIXTURES / transcript), *args])
