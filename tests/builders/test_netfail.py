"""A network failure is a type from where it is seen, never a reason text read again later.

The classifier is checked on what the real installers print (uv and pip run here against a
port nothing listens on, and against a live local index that lacks the version asked for),
and the source builder on a real build whose requirements resolve on a dead index: it raises
NetworkUnavailable (transient: never the commit's cached result), where a missing version on
a live index stays the commit's BuildError."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.isolate.helpers import source_spec
from vllm_bisect.bisect.range import open_repo
from vllm_bisect.builders import make_builder
from vllm_bisect.builders.netfail import network_failure
from vllm_bisect.errors import BuildError, IndexUnavailable, NetworkUnavailable, untestable_hint
from vllm_bisect.sim.package_index import PackageIndex, build_package
from vllm_bisect.sim.synth import dependency_history


def dead_url() -> str:
    """An index URL on a port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    dist = tmp_path_factory.mktemp("dist")
    build_package("tinydep", "1.0", '"""tinydep 1.0"""\nSPEC_OUTPUT_CAP = None\n', dist)
    with PackageIndex(dist) as idx:
        yield idx


def installer_env(tmp: Path) -> dict[str, str]:
    """No pip configuration of this machine (find-links, a mirror): the index given only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1",
            "UV_CACHE_DIR": str(tmp / "uv-cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def pip_output(tmp: Path, url: str, req: str) -> str:
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "1",
                        "--timeout", "10", "--index-url", url, "-d", str(tmp / "dl"), req],
                       capture_output=True, text=True, env=installer_env(tmp), timeout=300)
    assert r.returncode != 0
    return r.stdout + r.stderr


def uv_output(tmp: Path, url: str, req: str) -> str:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    venv = tmp / "venv"
    subprocess.run([uv, "venv", "--quiet", str(venv)], check=True, env=installer_env(tmp),
                   timeout=300)
    r = subprocess.run([uv, "pip", "install", "--python", str(venv / "bin" / "python"),
                        "--index-url", url, req], capture_output=True, text=True,
                       env=installer_env(tmp), timeout=300)
    assert r.returncode != 0
    return r.stdout + r.stderr


def test_what_pip_and_uv_print_for_a_dead_index_is_a_network_failure(tmp_path: Path) -> None:
    url = dead_url()
    pip = pip_output(tmp_path, url, "tinydep==1.0")
    assert network_failure(pip), pip
    uv = uv_output(tmp_path, url, "tinydep==1.0")
    assert network_failure(uv), uv


def test_a_version_missing_from_a_live_index_is_not(tmp_path: Path,
                                                      index: PackageIndex) -> None:
    pip = pip_output(tmp_path, index.url, "tinydep==9.9")
    assert "tinydep" in pip and not network_failure(pip), pip
    uv = uv_output(tmp_path, index.url, "tinydep==9.9")
    assert "tinydep" in uv and not network_failure(uv), uv
    # a compiler's words are not the network's
    assert not network_failure("openssl: error: unknown option\nerror: command 'gcc' failed")


def test_a_source_build_on_a_dead_index_is_a_network_failure(tmp_path: Path,
                                                                index: PackageIndex) -> None:
    h = dependency_history(tmp_path / "vllm", "tinydep", "1.0", "1.0", before=0, after=0)
    dead = make_builder(source_spec(h, dead_url()), open_repo(h.path), tmp_path / "c1",
                        tmp_path / "logs1")
    with pytest.raises(NetworkUnavailable) as caught:
        dead.prepare(h.good)
    err = caught.value
    assert isinstance(err, IndexUnavailable) and not err.final  # never cached as the commit's
    assert "the network failed" in err.message and err.log is not None
    assert "failed for a network reason" in untestable_hint(err.log, network=True)
    # the same build on a live index that lacks the pinned version: the commit's own failure
    h2 = dependency_history(tmp_path / "vllm2", "tinydep", "9.9", "9.9", before=0, after=0)
    live = make_builder(source_spec(h2, index.url), open_repo(h2.path), tmp_path / "c2",
                        tmp_path / "logs2")
    with pytest.raises(BuildError) as own:
        live.prepare(h2.good)
    assert not isinstance(own.value, NetworkUnavailable) and own.value.final


def test_the_hint_follows_the_type_not_the_words() -> None:
    # a reason that merely mentions a refused connection (a server's own log line) is not a
    # network failure of the build: only the typed flag says so
    plain = untestable_hint(None, advice="", role="good")
    assert "network" not in plain
    assert "network reason" in untestable_hint(None, network=True)
    assert "not now" in untestable_hint(None, transient=True)
