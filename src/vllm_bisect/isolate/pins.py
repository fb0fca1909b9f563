"""Dependency pins in a vLLM tree, what a commit changed in them, and rewriting one (pure).

Read: ``requirements*.txt`` and ``requirements/*.txt`` (requirement lines), ``pyproject.toml``
(``project.dependencies``, optional dependencies, ``build-system.requires``), ``setup.py``
(quoted requirement strings), and Dockerfiles (``docker/Dockerfile*``): the base versions
as vLLM's ``docker/Dockerfile`` writes them, ``ARG`` defaults whose name says version, git
ref, tag, commit, wheel or base image (``ARG CUDA_VERSION=12.8.1``, ``ARG PYTHON_VERSION=3.12``,
``ARG BUILD_BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04``,
``ARG FLASHINFER_GIT_REF="v0.3.1"``, ``ARG FLASHINFER_WHEEL=...``) and ``FROM image:tag`` with
a literal tag. A pin is keyed by (file, package, environment marker).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from enum import StrEnum

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version


class PinKind(StrEnum):
    PYTHON = "python"    # a Python requirement (installable from a package index)
    DOCKER = "docker"    # a Dockerfile base image or version argument


@dataclass(frozen=True)
class Pin:
    file: str
    name: str            # canonical package name, or the Dockerfile ARG / image
    spec: str            # specifier ("==2.9.0", ">=1.2,<2"), or the ARG value / image tag
    marker: str = ""
    kind: PinKind = PinKind.PYTHON

    @property
    def exact(self) -> Version | None:
        """The version of an exact ``==`` pin."""
        m = re.fullmatch(r"===?\s*([^,;*\s]+)", self.spec.strip())
        if not m:
            return None
        try:
            return Version(m.group(1))
        except InvalidVersion:
            return None


@dataclass(frozen=True)
class PinChange:
    file: str
    name: str
    marker: str
    kind: PinKind
    old: str | None      # None: added
    new: str | None      # None: removed

    @property
    def label(self) -> str:
        where = f"{self.file}" + (f" [{self.marker}]" if self.marker else "")
        def show(spec: str | None) -> str:
            return "(none)" if spec is None else spec or "(any)"

        return f"{self.name} {show(self.old)} -> {show(self.new)} ({where})"


def is_pin_file(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return ((base.startswith("requirements") and base.endswith((".txt", ".in")))
            or (path.startswith("requirements/") and base.endswith((".txt", ".in")))
            or path in ("pyproject.toml", "setup.py") or is_dockerfile(path))


def is_dockerfile(path: str) -> bool:
    return path.rsplit("/", 1)[-1].startswith("Dockerfile")


def _req(text: str, file: str) -> Pin | None:
    try:
        r = Requirement(text)
    except InvalidRequirement:
        return None
    return Pin(file, canonicalize_name(r.name), str(r.specifier), str(r.marker or ""))


def _requirement_lines(text: str, file: str) -> list[Pin]:
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        pin = _req(line, file)
        if pin is not None:
            out.append(pin)
    return out


QUOTED = re.compile(r"""(["'])([A-Za-z0-9][A-Za-z0-9._\-\[\], ]*\s*(?:===|==|>=|<=|~=|!=|<|>)"""
                    r"""[^"'\n]*)\1""")
ARG = re.compile(r"""^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)\s*=\s*("[^"\n]*"|'[^'\n]*'|\S+)""", re.M)
BASE_ARG = re.compile(r"VERSION|_REF$|_TAG$|_COMMIT$|_SHA$|_WHEEL$|BASE_IMAGE", re.I)
FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?([^\s:@]+)[:@](\S+)", re.M)


def pins_of(path: str, text: str) -> list[Pin]:
    base = path.rsplit("/", 1)[-1]
    if base.startswith("Dockerfile"):
        return ([Pin(path, n, v.strip("\"'"), kind=PinKind.DOCKER)
                 for n, v in ARG.findall(text) if BASE_ARG.search(n)]
                + [Pin(path, n, v, kind=PinKind.DOCKER) for n, v in FROM.findall(text)
                   if "$" not in n + v])  # (a tag built from an ARG: the ARG is the pin)
    if path == "pyproject.toml":
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return []
        project = doc.get("project", {})
        reqs = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            reqs += list(extra)
        reqs += list(doc.get("build-system", {}).get("requires", []))
        return [p for p in (_req(r, path) for r in reqs if isinstance(r, str)) if p]
    if path.endswith(".py"):
        return [p for p in (_req(m.group(2), path) for m in QUOTED.finditer(text)) if p]
    return _requirement_lines(text, path)


def pin_changes(before: dict[str, str], after: dict[str, str]) -> list[PinChange]:
    """Pins that differ between two trees' pin files (path -> text; absent: no such file)."""
    old = {(p.file, p.name, p.marker): p for path, text in before.items()
           for p in pins_of(path, text)}
    new = {(p.file, p.name, p.marker): p for path, text in after.items()
           for p in pins_of(path, text)}
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a is not None and b is not None and a.spec == b.spec:
            continue
        kind = (a or b).kind  # type: ignore[union-attr]
        out.append(PinChange(key[0], key[1], key[2], kind, a.spec if a else None,
                             b.spec if b else None))
    return out


def rewrite(path: str, text: str, name: str, version: str) -> str:
    """``text`` of a pin file with every requirement on ``name`` pinned to ``==version``
    (extras and markers kept)."""
    want = canonicalize_name(name)

    def pinned(req_text: str) -> str | None:
        try:
            r = Requirement(req_text)
        except InvalidRequirement:
            return None
        if canonicalize_name(r.name) != want:
            return None
        extras = f"[{','.join(sorted(r.extras))}]" if r.extras else ""
        marker = f"; {r.marker}" if r.marker else ""
        return f"{r.name}{extras}=={version}{marker}"

    if path == "pyproject.toml" or path.endswith(".py"):
        def sub(m: re.Match[str]) -> str:
            got = pinned(m.group(2))
            return m.group(0) if got is None else f"{m.group(1)}{got}{m.group(1)}"
        return QUOTED.sub(sub, text)
    lines = []
    for raw in text.splitlines(keepends=True):
        body = raw.rstrip("\n")
        code, sep, comment = body.partition(" #")
        got = pinned(code.strip()) if code.strip() and not code.lstrip().startswith(("#", "-")) \
            else None
        lines.append(raw if got is None else got + (sep + comment if sep else "")
                     + raw[len(body):])
    return "".join(lines)
