"""The ``wheel`` builder: vLLM's per-commit wheel, installed into a venv per commit.

The wheel is downloaded once into the content-addressed artifact cache (``wheels/<sha256>``),
then installed with ``uv pip install <wheel> --torch-backend=auto`` (one shared uv cache, so
torch and friends download once per bisect) or, without uv, with pip and the exact wheel file.
The installed distribution's version must carry ``+g<sha[:9]>``: vLLM's index can silently
hand out another build (see CONTEXT.md), and a wrong build must never be judged.
"""

from __future__ import annotations

import contextlib
import email.parser
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import BinaryIO

import httpx

from vllm_bisect import net
from vllm_bisect.builders.base import Artifact, ArtifactKind
from vllm_bisect.builders.cache import ArtifactCache, parse_size
from vllm_bisect.builders.fetch import get_same_origin, transient, wheel_filename
from vllm_bisect.builders.netfail import network_error
from vllm_bisect.builders.source import DONE_MARK, find_python, find_uv
from vllm_bisect.builders.wheel_index import WheelEntry, choose
from vllm_bisect.envinfo import Platform, detect
from vllm_bisect.errors import (
    ArtifactUnavailable,
    BuildError,
    Cancelled,
    IndexUnavailable,
    disk_full,
)
from vllm_bisect.runtime.bounded import PROBE_S, run_bounded
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.process import tail
from vllm_bisect.spec import OpsSpec, WheelBuild

logger = logging.getLogger(__name__)


def version_matches(version: str, commit: str) -> bool:
    local = version.partition("+")[2]
    return any(part.startswith("g") and len(part) >= 8 and commit.startswith(part[1:])
               for part in local.split("."))


DIST_INFO_METADATA = re.compile(r"^[^/]+\.dist-info/METADATA$")
MAX_METADATA_BYTES = 1 << 20
# a member over 64 MiB packed more than 100:1 is a zip bomb (compiled kernels and Python
# pack 2-5:1; a run of zeros packs about 1000:1)
BOMB_MIN_BYTES = 64 << 20
MAX_MEMBER_RATIO = 100
INSTALL_S = 3600.0  # creating the venv, installing the wheel and its dependencies


def check_members(wheel: Path, z: zipfile.ZipFile, max_unpacked: int) -> None:
    """Refuse a wheel that would unpack to more than ``max_unpacked`` bytes (a zip bomb fills
    the venv and the installer's cache), that packs over ``MAX_MEMBER_RATIO``:1 in one member
    or over all of them (past ``BOMB_MIN_BYTES``), or that names a member outside its root (``../``,
    an absolute path): installers drop such members silently, so what ran would not be
    what the wheel holds."""
    total = packed = 0
    for info in z.infolist():
        name = info.filename.replace("\\", "/")
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or ".." in name.split("/"):
            raise ArtifactUnavailable(f"{wheel.name} holds a member outside its root "
                                      f"({info.filename[:200]!r}): refused",
                                      hint="the wheel is broken or tampered with; this commit "
                                           "is skipped (nothing of it was installed)")
        if (info.file_size > BOMB_MIN_BYTES
                and info.file_size > MAX_MEMBER_RATIO * max(1, info.compress_size)):
            raise ArtifactUnavailable(
                f"{wheel.name} holds {info.filename[:200]!r}, {info.file_size} bytes packed "
                f"{info.file_size // max(1, info.compress_size)}:1 (a zip bomb): refused",
                hint="this commit is skipped (nothing of it was installed)")
        total += info.file_size
        packed += info.compress_size
        if total > max_unpacked:
            raise ArtifactUnavailable(
                f"{wheel.name} unpacks to more than {max_unpacked} bytes "
                f"({wheel.stat().st_size} packed): refused",
                hint="raise ops.max_unpacked_size if the wheel is genuine; this commit is "
                     "skipped (nothing of it was installed)")
    if total > BOMB_MIN_BYTES and total > MAX_MEMBER_RATIO * max(1, packed):
        # many members, each under the member check (33 x 62 MiB of zeros from 2 MB)
        raise ArtifactUnavailable(
            f"{wheel.name} unpacks to {total} bytes from {packed} packed "
            f"({total // max(1, packed)}:1 over its {len(z.infolist())} members: a zip bomb): "
            "refused", hint="this commit is skipped (nothing of it was installed)")


def wheel_version(wheel: Path, max_unpacked: int = 1 << 62) -> str:
    """The version in the wheel's own ``*.dist-info/METADATA`` (read, never installed), once
    its members are checked (:func:`check_members`)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            check_members(wheel, z, max_unpacked)
            found = [i for i in z.infolist() if DIST_INFO_METADATA.match(i.filename)]
            if len(found) != 1 or found[0].file_size > MAX_METADATA_BYTES:
                raise ArtifactUnavailable(f"{wheel.name} has {len(found)} usable dist-info "
                                          "METADATA files (want exactly one): refused")
            text = z.read(found[0]).decode("utf-8", errors="replace")
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise ArtifactUnavailable(f"{wheel.name} is not a readable wheel: {err}") from None
    meta = email.parser.HeaderParser().parsestr(text)
    name = re.sub(r"[-_.]+", "-", str(meta.get("Name", ""))).lower()
    if name != "vllm":
        raise ArtifactUnavailable(f"{wheel.name} is the package {name or '(unnamed)'!r}, not "
                                  "vllm: refused")
    return str(meta.get("Version", "(no version)"))


def part_path(target: Path) -> Path:
    """Where a download lands before it is checked and renamed: unique to this process and
    thread, so runs sharing a cache never write or rename each other's file."""
    return target.with_name(f".{target.name}.{os.getpid()}-{threading.get_ident()}.part")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file of its own (several writers, a
    kill mid-write: a reader sees the old file or the new one, never a part)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class WheelBuilder:
    def __init__(self, spec: WheelBuild, cache: ArtifactCache, log_dir: Path,
                 platform: Platform | None = None, client: httpx.Client | None = None,
                 ops: OpsSpec | None = None) -> None:
        self.spec = spec
        self.cache = cache
        self.log_dir = log_dir
        self.platform = platform or detect()
        self.ops = ops or OpsSpec()  # the network deadlines and the size caps
        self.client = client or net.client(timeout=httpx.Timeout(60.0, read=600.0))
        self.uv = find_uv()

    def prepare(self, commit: str, cancel: threading.Event | None = None) -> Artifact:
        entry = choose(self.client, self.spec.index_url, commit, self.spec.variant, self.platform,
                       self.ops.index_deadline_s)
        if not version_matches(entry.version, commit):
            raise ArtifactUnavailable(
                f"the index lists vllm {entry.version}, which does not carry +g{commit[:9]} "
                f"(asked for {commit[:12]})",
                hint="the index served another build; this commit is skipped, never judged")
        key = f"venv-wheel-{commit}-{entry.variant}-{self.platform.arch}"
        venv = self.cache.path(key)
        with self.cache.key_lock(key):  # another run sharing the cache may be making it
            if (venv / DONE_MARK).exists():
                self.cache.touch(key)
                return self._artifact(commit, venv, entry.filename, cached=True)
            wheel, sha = self._download(entry, commit, cancel)
            # before anything of the wheel is installed or run
            version = wheel_version(wheel, parse_size(self.ops.max_unpacked_size))
            if not version_matches(version, commit):
                raise ArtifactUnavailable(
                    f"the wheel's METADATA says vllm {version}, which does not carry "
                    f"+g{commit[:9]} (asked for {commit[:12]})",
                    hint="the index served another build; this commit is skipped, never "
                         "judged (nothing of it was installed)")
            shutil.rmtree(venv, ignore_errors=True)
            log = self.log_dir / f"install-{commit[:12]}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "wb") as out:
                self._install(venv, wheel, out, log, commit)
            version = self._installed_version(venv, commit)
            if not version_matches(version, commit):
                shutil.rmtree(venv, ignore_errors=True)
                raise ArtifactUnavailable(
                    f"installed vllm {version} does not carry +g{commit[:9]} "
                    f"(asked for {commit[:12]})",
                    hint="the index served another build; this commit is skipped, never judged")
            write_atomic(venv / DONE_MARK, f"{commit}\n{entry.filename}\n{version}\n{sha}\n")
            self.cache.register(key, venv, commit=commit, kind="venv")
        return self._artifact(commit, venv, entry.filename, cached=False)

    def _download(self, entry: WheelEntry, commit: str,
                  cancel: threading.Event | None = None) -> tuple[Path, str]:
        """The wheel in the cache and its sha256: downloaded to a unique temporary file,
        checked (size, the index's hash), then renamed into place under the key's lock."""
        url, filename = entry.url, entry.filename
        wheel_filename(filename)
        key = "wheel-" + hashlib.sha256(url.encode()).hexdigest()[:24]
        folder = self.cache.path(key)
        target = folder / filename
        if not self.cache.inside(target):
            raise ArtifactUnavailable(f"wheel path {target} leaves the cache: refused")
        with self.cache.key_lock(key):
            have = _read(folder / "sha256")
            if target.exists() and have and entry.sha256 in (None, have):
                self.cache.touch(key)
                return target, have
            try:
                folder.mkdir(parents=True, exist_ok=True)
                sha = self._fetch(entry, folder, target, cancel)
                write_atomic(folder / "sha256", sha + "\n")
            except OSError as err:
                fault = disk_full(err, f"storing the wheel {target}")
                if fault is not None:  # every later commit would fail too: stop the run
                    raise fault from None
                raise ArtifactUnavailable(f"cannot store the wheel ({err.strerror}): "
                                          f"{target}") from None
            self.cache.register(key, folder, commit=commit, kind="wheel")
        return target, sha

    def _fetch(self, entry: WheelEntry, folder: Path, target: Path,
               cancel: threading.Event | None) -> str:
        url = entry.url
        tmp = part_path(target)
        digest = hashlib.sha256()
        try:
            with open(tmp, "wb") as fh, get_same_origin(
                    self.client, url, self.spec.index_url, self.ops.download_deadline_s,
                    what="the wheel download") as (r, dog):
                if r.status_code != 200:
                    error = IndexUnavailable if transient(r.status_code) else ArtifactUnavailable
                    raise error(f"wheel download failed: HTTP {r.status_code} {url}")
                expected = r.headers.get("content-length")
                size = 0
                for chunk in net.iter_bytes(r, dog, parse_size(self.ops.max_wheel_size),
                                            1 << 20):
                    if cancel is not None and cancel.is_set():
                        raise Cancelled(f"download of {entry.filename} cancelled")
                    fh.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
            if expected is not None and expected.isdigit() and int(expected) != size:
                raise IndexUnavailable(f"wheel download truncated ({size} of {expected} "
                                       f"bytes): {url}", hint="the index may be flaky; a later "
                                       "run asks again")
            if entry.sha256 is not None and digest.hexdigest() != entry.sha256:
                raise ArtifactUnavailable(
                    f"wheel {entry.filename} has sha256 {digest.hexdigest()[:16]}..., the index "
                    f"says {entry.sha256[:16]}...: refused", hint="the download was corrupted or "
                    "tampered with; this commit is skipped")
            os.replace(tmp, target)
        except net.TooLarge as err:
            raise ArtifactUnavailable(
                f"wheel {entry.filename} is larger than {err.cap} bytes: refused",
                hint="raise ops.max_wheel_size if the wheel is genuine") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return digest.hexdigest()

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
            try:
                code = run_bounded(cmd, INSTALL_S, env=env, stdout=out,
                                   stderr=subprocess.STDOUT).returncode
            except subprocess.TimeoutExpired:
                shutil.rmtree(venv, ignore_errors=True)
                raise BuildError(f"installing the wheel for {commit[:12]} did not finish "
                                 f"within {INSTALL_S:.0f} s: stopped", hint=f"see {log}",
                                 log_tail=tail(log, 20)) from None
            if code != 0:
                shutil.rmtree(venv, ignore_errors=True)
                what = f"installing the wheel for {commit[:12]} failed (exit {code})"
                raise network_error(what, tail(log, 60), hint=f"see {log}",
                                    log_tail=tail(log, 20)) or BuildError(
                    what, hint=f"see {log}", log_tail=tail(log, 20))

    def _installed_version(self, venv: Path, commit: str) -> str:
        """The vllm version the venv's Python reports, within a deadline (a ``.pth`` file of
        the wheel runs at every start of that Python: one that hangs is a skip)."""
        limit = min(PROBE_S, self.ops.startup_timeout_s)
        try:
            out = run_bounded([str(venv / "bin" / "python"), "-c",
                               "import importlib.metadata as m; print(m.version('vllm'))"],
                              limit, env=child_env())
        except subprocess.TimeoutExpired:
            shutil.rmtree(venv, ignore_errors=True)
            raise BuildError(
                f"the installed wheel's Python did not start within {limit:.0f} s (asked for "
                f"vllm's version at {commit[:12]}; a .pth file or sitecustomize of the wheel "
                "that hangs?): stopped",
                hint="this commit is skipped; ops.startup_timeout_s bounds this check too") from None
        return out.stdout.decode(errors="replace").strip() or "(not installed)"

    def _artifact(self, commit: str, venv: Path, filename: str, cached: bool) -> Artifact:
        lines = (venv / DONE_MARK).read_text().split("\n") if (venv / DONE_MARK).exists() else []
        sha = lines[3] if len(lines) > 3 else "?"
        return Artifact(commit=commit, kind=ArtifactKind.WHEEL,
                        identity=f"wheel:{filename} sha256:{sha}", venv=venv, cached=cached)
