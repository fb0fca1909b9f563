"""A user's install (``pip install -e .``) inside the developer's: the modules of the ``dev``
extra (pytest, ruff, mypy, ray, setuptools, wheel, ...) are made unimportable in child
processes through a ``sitecustomize`` on PYTHONPATH, so a command that still needs one
fails as it would for a user who installed the tool without ``[dev]``."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]
# the import names of each distribution of the dev extra that the base install lacks
IMPORTS = {"pytest": ("pytest", "_pytest"), "pytest-xdist": ("xdist",), "ruff": ("ruff",),
           "mypy": ("mypy",), "types-docker": (), "ray": ("ray",),
           "setuptools": ("setuptools", "pkg_resources"), "wheel": ("wheel",),
           "jsonschema": ("jsonschema",), "pyyaml": ("yaml",)}

SITECUSTOMIZE = """\
import importlib.abc
import sys

BLOCKED = {blocked!r}


class _DevOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(
                f"No module named {{name!r}} (a dev-only module: not in a user's install)",
                name=name)
        return None


sys.meta_path.insert(0, _DevOnly())
"""


def dev_only_distributions() -> list[str]:
    """The dev extra's distributions that the base dependencies do not bring."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def name(req: str) -> str:
        return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].strip().lower()

    base = {name(r) for r in project["dependencies"]}
    return [n for n in map(name, project["optional-dependencies"]["dev"]) if n not in base]


def user_env(tmp: Path) -> dict[str, str]:
    """The environment of a user's install: this checkout's package, no dev module."""
    blocked = sorted({m for d in dev_only_distributions() for m in IMPORTS[d]})
    d = tmp / "user-install"
    d.mkdir(parents=True, exist_ok=True)
    (d / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=blocked))
    path = [str(d), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
