"""The ``source`` builder: a worktree and a venv per commit, ``pip install .`` of the checkout.

uv is used when it is available (``uv venv`` + ``uv pip install``), else ``python -m venv``
and pip. With ``precompiled = true`` (real vLLM, Python-only commits) the install runs with
``VLLM_USE_PRECOMPILED=1`` and ``VLLM_PRECOMPILED_WHEEL_COMMIT=<full sha>``, reusing the
compiled parts of that commit's wheel; with ``wheel_location`` a local wheel serves every
commit (``VLLM_PRECOMPILED_WHEEL_LOCATION``, a slim uncompressed copy made once:
builders/local_wheel.py), and a commit that changed compiled sources since ``wheel_commit``
is a skip. ``reuse_installed`` builds against the interpreter's own packages (the installed
torch: ``--system-site-packages``, no build isolation, ``--no-deps``), as vLLM's "use an
existing PyTorch" workflow does. A venv is marked complete only after a successful install,
so an interrupted build is redone, and a complete one is reused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from vllm_bisect.builders.base import Artifact, ArtifactKind
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.builders.local_wheel import PRETEND_ENV, pretend_version, slim_wheel, wheel_release
from vllm_bisect.builders.netfail import network_error
from vllm_bisect.builders.precompiled import BuildMode, SourcePlan, plan_source_build
from vllm_bisect.errors import ArtifactUnavailable, BuildError, RecoverableError, ToolMissing
from vllm_bisect.runtime.bounded import PROBE_S, run_bounded
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.process import tail
from vllm_bisect.spec import SourceBuild

logger = logging.getLogger(__name__)
DONE_MARK = ".vllm-bisect-complete"
SKIP_HINT = "set build.full_build = true to compile"


def _skip(plan: SourcePlan | None) -> ArtifactUnavailable | None:
    """The skip a build plan means (a compiled change and no full build), or None."""
    if plan is not None and plan.mode is BuildMode.SKIP:
        return ArtifactUnavailable(plan.reason, hint=SKIP_HINT)
    return None


def find_uv() -> str | None:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def find_python(version: str | None) -> str:
    if version is None:
        return sys.executable
    for name in (f"python{version}", "python3"):
        found = shutil.which(name)
        if found and (name != "python3" or _version_of(found).startswith(version)):
            return found
    raise ToolMissing(f"no Python {version} interpreter found on PATH",
                      hint=f"install python{version}, or set build.python to one you have")


def _version_of(python: str) -> str:
    try:
        out = run_bounded([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          PROBE_S, env=child_env())
    except (OSError, subprocess.TimeoutExpired):
        return ""   # (not the version asked for)
    return out.stdout.decode(errors="replace").strip()


HasWheel = Callable[[str], bool]
PARENT_PTH = "_vllm_bisect_parent_site.pth"


def link_parent_site(python: str, venv: Path) -> None:
    """Let the venv see the site-packages of the interpreter that made it.

    ``--system-site-packages`` only reaches the *base* installation: when that interpreter
    is itself a venv (the GPU machine's torch lives in /opt/torch/.venv), its packages
    would be invisible. A .pth file in the new venv adds them after the venv's own."""
    code = "import site, json; print(json.dumps(site.getsitepackages()))"
    try:
        out = run_bounded([python, "-c", code], PROBE_S, env=child_env())
        dirs = [d for d in json.loads(out.stdout) if Path(d).is_dir()]
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return
    # an "import" line: addsitedir also runs the .pth files there (editable installs, ...)
    line = f"import site; list(map(site.addsitedir, {dirs!r}))\n"
    for site_dir in venv.glob("lib/python*/site-packages"):
        (site_dir / PARENT_PTH).write_text(line)


class SourceBuilder:
    def __init__(self, checkouts: Checkouts, spec: SourceBuild, cache_dir: Path, log_dir: Path,
                 use_uv: bool | None = None, timeout_s: float = 4 * 3600.0,
                 has_wheel: HasWheel | None = None) -> None:
        self.checkouts = checkouts
        self.has_wheel = has_wheel
        self.spec = spec
        self.log_dir = log_dir
        self.timeout_s = timeout_s
        self.cache_dir = cache_dir
        self._slim: Path | None = None
        self._plans: dict[str, SourcePlan] = {}  # per commit, once the index answered
        key = hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:10]
        self.venv_root = cache_dir / "venvs" / key
        self.uv = find_uv() if use_uv in (None, True) else None
        if use_uv and self.uv is None:
            raise ToolMissing("uv is not installed", hint="pip install uv, or let it fall back to pip")

    def plan(self, commit: str) -> SourcePlan | None:
        """How a precompiled build of commit would go (None when precompiled is off). Asked
        once per commit: the run's early check of its endpoints and their build share it (an
        index that did not answer raises, and is asked again next time)."""
        if not self.spec.precompiled:
            return None
        if self.has_wheel is None:  # no index to ask: trust the commit's own wheel
            return SourcePlan(BuildMode.PRECOMPILED, commit, (), "precompiled from itself")
        if commit not in self._plans:
            self._plans[commit] = plan_source_build(self.checkouts.repo, commit, self.has_wheel,
                                                    self.spec.full_build)
        return self._plans[commit]

    def unbuildable(self, commit: str) -> ArtifactUnavailable | None:
        """The skip :meth:`prepare` would raise for its plan, without building (none once
        the commit is built)."""
        if (self.venv_root / commit / DONE_MARK).exists():
            return None
        try:
            return _skip(self.plan(commit))
        except RecoverableError:  # the index did not answer: prepare will ask (and say) again
            return None

    def prepare(self, commit: str) -> Artifact:
        start = time.monotonic()
        checkout = self.checkouts.get(commit)
        checkout_s = time.monotonic() - start
        venv = self.venv_root / commit
        if (venv / DONE_MARK).exists():
            with contextlib.suppress(OSError):   # its last use (`cache ls` / `cache prune`)
                os.utime(venv / DONE_MARK)
            return self._artifact(commit, checkout, venv, cached=True)
        plan = self.plan(commit)
        if (skip := _skip(plan)) is not None:
            raise skip
        shutil.rmtree(venv, ignore_errors=True)
        log = self.log_dir / f"build-{commit[:12]}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = self._build_env(commit, plan)
        python = find_python(self.spec.python) if self.spec.python or not self.uv else sys.executable
        with open(log, "wb") as out:
            out.write(f"# checkout {checkout_s:.2f} s\n".encode())
            self._run(self._venv_cmd(python, venv), out, checkout, env, log, commit)
            if self.spec.reuse_installed:
                link_parent_site(python, venv)
            self._run(self._install_cmd(venv, checkout), out, checkout, env, log, commit)
        how = plan.reason if plan is not None else "plain install"
        (venv / DONE_MARK).write_text(f"{commit}\n{how}\n")
        return self._artifact(commit, checkout, venv, cached=False)

    def _build_env(self, commit: str, plan: SourcePlan | None) -> dict[str, str]:
        env = child_env()  # an allowlist: no credentials reach setup.py
        if plan is None or plan.mode is not BuildMode.PRECOMPILED or plan.base is None:
            return env
        env["VLLM_USE_PRECOMPILED"] = "1"
        if self.spec.wheel_location is not None:
            env["VLLM_PRECOMPILED_WHEEL_LOCATION"] = self._wheel_location()
            version = pretend_version(self.checkouts.repo, commit,
                                      wheel_release(self.spec.wheel_location))
            if version is not None:  # a history without tags: not setuptools-scm's 0.1.devN
                env[PRETEND_ENV] = version
            return env
        env["VLLM_PRECOMPILED_WHEEL_COMMIT"] = plan.base
        if self.spec.variant not in ("auto", "default"):
            env["VLLM_PRECOMPILED_WHEEL_VARIANT"] = self.spec.variant
        return env

    def _wheel_location(self) -> str:
        loc = self.spec.wheel_location
        assert loc is not None
        if "://" in loc and not loc.startswith("file://"):
            return loc  # a URL: setup.py downloads it
        path = Path(loc.removeprefix("file://")).expanduser()
        if self._slim is None:
            self._slim = slim_wheel(path, self.cache_dir)
        return str(self._slim)

    def _venv_cmd(self, python: str, venv: Path) -> list[str]:
        shared = ["--system-site-packages"] if self.spec.reuse_installed else []
        if self.uv:
            return [self.uv, "venv", "--quiet", *shared, "--python", python, str(venv)]
        return [python, "-m", "venv", *shared, str(venv)]

    def _install_cmd(self, venv: Path, checkout: Path) -> list[str]:
        py = str(venv / "bin" / "python")
        extra = list(self.spec.install_args)
        if self.spec.reuse_installed:  # the installed torch and build requirements, no resolver
            extra += ["--no-deps", "--no-build-isolation"]
        target = ["-e", str(checkout)] if self.spec.editable else [str(checkout)]
        if self.uv:
            return [self.uv, "pip", "install", "--python", py, *extra, *target]
        return [py, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile",
                *extra, *target]

    def _run(self, cmd: list[str], out: BinaryIO, cwd: Path, env: dict[str, str], log: Path,
             commit: str) -> None:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        start = time.monotonic()
        try:
            code = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=self.timeout_s).returncode
        except subprocess.TimeoutExpired:
            code = -1
        except OSError as err:
            raise ToolMissing(f"cannot run {cmd[0]}: {err.strerror}") from None
        out.write(f"# exit {code} after {time.monotonic() - start:.2f} s\n".encode())
        out.flush()
        if code != 0:
            what = f"build of {commit[:12]} failed (exit {code}): {' '.join(cmd[:3])} ..."
            hint = f"see the build log: {log}"
            raise network_error(what, tail(log, 60), hint=hint, log_tail=tail(log, 20),
                                log=log) or BuildError(what, hint=hint, log_tail=tail(log, 20),
                                                       log=log)

    def _artifact(self, commit: str, checkout: Path, venv: Path, cached: bool) -> Artifact:
        lines = (venv / DONE_MARK).read_text().splitlines()
        how = lines[1] if len(lines) > 1 else "plain install"
        return Artifact(commit=commit, kind=ArtifactKind.SOURCE, identity=f"venv:{venv} ({how})",
                        checkout=checkout, venv=venv, cached=cached)
