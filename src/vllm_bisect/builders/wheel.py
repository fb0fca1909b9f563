"""The ``wheel`` builder: vLLM's per-commit wheel, installed into a venv per commit.

The wheel is downloaded once into the content-addressed artifact cache (``wheels/<sha256>``),
then installed with ``uv pip install <wheel> --torch-backend=auto`` (one shared uv cache, so
torch and friends download once per bisect) or, without uv, with pip and the exact wheel file.
The installed distribution's version must carry ``+g<sha[:9]>``: vLLM's index can silently
hand out another build (see CONTEXT.md), and a wrong build must never be judged.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO

import httpx

from vllm_bisect.builders.base import Artifact, ArtifactKind
from vllm_bisect.builders.cache import ArtifactCache
from vllm_bisect.builders.source import DONE_MARK, find_python, find_uv
from vllm_bisect.builders.wheel_index import choose
from vllm_bisect.envinfo import Platform, detect
from vllm_bisect.errors import ArtifactUnavailable, BuildError, Cancelled, HostFault
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.process import tail
from vllm_bisect.spec import BuildSpec

logger = logging.getLogger(__name__)


def version_matches(version: str, commit: str) -> bool:
    local = version.partition("+")[2]
    return any(part.startswith("g") and len(part) >= 8 and commit.startswith(part[1:])
               for part in local.split("."))


class WheelBuilder:
    def __init__(self, spec: BuildSpec, cache: ArtifactCache, log_dir: Path,
                 platform: Platform | None = None, client: httpx.Client | None = None) -> None:
        self.spec = spec
        self.cache = cache
        self.log_dir = log_dir
        self.platform = platform or detect()
        self.client = client or httpx.Client(timeout=httpx.Timeout(60.0, read=600.0))
        self.uv = find_uv()

    def prepare(self, commit: str, cancel: threading.Event | None = None) -> Artifact:
        entry = choose(self.client, self.spec.index_url, commit, self.spec.variant, self.platform)
        key = f"venv-wheel-{commit}-{entry.variant}-{self.platform.arch}"
        venv = self.cache.path(key)
        if (venv / DONE_MARK).exists():
            self.cache.touch(key)
            return self._artifact(commit, venv, entry.filename, cached=True)
        wheel = self._download(entry.url, entry.filename, commit, cancel)
        shutil.rmtree(venv, ignore_errors=True)
        log = self.log_dir / f"install-{commit[:12]}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            self._install(venv, wheel, out, log, commit)
        version = self._installed_version(venv)
        if not version_matches(version, commit):
            shutil.rmtree(venv, ignore_errors=True)
            raise ArtifactUnavailable(
                f"installed vllm {version} does not carry +g{commit[:9]} (asked for {commit[:12]})",
                hint="the index served another build; this commit is skipped, never judged")
        sha = (wheel.parent / "sha256").read_text().strip()
        (venv / DONE_MARK).write_text(f"{commit}\n{entry.filename}\n{version}\n{sha}\n")
        self.cache.register(key, venv, commit=commit, kind="venv")
        return self._artifact(commit, venv, entry.filename, cached=False)

    def _download(self, url: str, filename: str, commit: str,
                  cancel: threading.Event | None = None) -> Path:
        key = "wheel-" + hashlib.sha256(url.encode()).hexdigest()[:24]
        target = self.cache.path(key) / filename
        if target.exists():
            self.cache.touch(key)
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_suffix(".part")
        digest = hashlib.sha256()
        try:
            with self.client.stream("GET", url, follow_redirects=True) as r:
                if r.status_code != 200:
                    raise ArtifactUnavailable(f"wheel download failed: HTTP {r.status_code} {url}")
                expected = r.headers.get("content-length")
                size = 0
                with open(part, "wb") as fh:
                    for chunk in r.iter_bytes(1 << 20):
                        if cancel is not None and cancel.is_set():
                            raise Cancelled(f"download of {filename} cancelled")
                        fh.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                if expected is not None and int(expected) != size:
                    raise ArtifactUnavailable(f"wheel download truncated ({size} of {expected} "
                                              f"bytes): {url}", hint="retry; the index may be flaky")
        except httpx.HTTPError as err:
            part.unlink(missing_ok=True)
            raise ArtifactUnavailable(f"wheel download failed: {err}: {url}") from None
        except OSError as err:
            part.unlink(missing_ok=True)
            if err.errno == errno.ENOSPC:  # every later commit would fail too: stop the run
                raise HostFault(f"no space left while storing the wheel {target}",
                                hint="free disk space or run `vllm-bisect cache prune "
                                     "--max-size ...`; then resume the session") from None
            raise ArtifactUnavailable(f"cannot store the wheel ({err.strerror}): {target}") from None
        except ArtifactUnavailable:
            part.unlink(missing_ok=True)
            raise
        part.rename(target)
        (target.parent / "sha256").write_text(digest.hexdigest() + "\n")
        self.cache.register(key, target.parent, commit=commit, kind="wheel")
        return target

    def _install(self, venv: Path, wheel: Path, out: BinaryIO, log: Path, commit: str) -> None:
        python = find_python(self.spec.python) if self.spec.python or not self.uv else sys.executable
        env = child_env()  # an allowlist: no credentials reach the installer
        env.setdefault("UV_CACHE_DIR", str(self.cache.root / "uv-cache"))
        if self.uv:
            cmds = [[self.uv, "venv", "--quiet", "--python", python, str(venv)],
                    [self.uv, "pip", "install", "--python", str(venv / "bin" / "python"),
                     "--torch-backend=auto", str(wheel)]]
        else:
            cmds = [[python, "-m", "venv", str(venv)],
                    [str(venv / "bin" / "python"), "-m", "pip", "install",
                     "--disable-pip-version-check", str(wheel)]]
        for cmd in cmds:
            out.write(f"$ {' '.join(cmd)}\n".encode())
            out.flush()
            code = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, check=False).returncode
            if code != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise BuildError(f"installing the wheel for {commit[:12]} failed (exit {code})",
                                 hint=f"see {log}", log_tail=tail(log, 20))

    @staticmethod
    def _installed_version(venv: Path) -> str:
        out = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('vllm'))"],
                             capture_output=True, text=True, check=False, env=child_env())
        return out.stdout.strip() or "(not installed)"

    def _artifact(self, commit: str, venv: Path, filename: str, cached: bool) -> Artifact:
        lines = (venv / DONE_MARK).read_text().split("\n") if (venv / DONE_MARK).exists() else []
        sha = lines[3] if len(lines) > 3 else "?"
        return Artifact(commit=commit, kind=ArtifactKind.WHEEL,
                        identity=f"wheel:{filename} sha256:{sha}", venv=venv, cached=cached)
