"""The versions of a package that a PEP 503 simple index offers (wheels and sdists, yanked
files left out), and which of them lie between two pins."""

from __future__ import annotations

import html
import re

import httpx
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from vllm_bisect.errors import FatalError

ANCHOR = re.compile(r"<a\s+([^>]*)>([^<]*)</a>", re.I)
PYPI = "https://pypi.org/simple"


def _version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def versions(index_url: str, name: str, timeout_s: float = 30.0) -> list[Version]:
    """Every version of ``name`` on the index, oldest first."""
    url = f"{index_url.rstrip('/')}/{canonicalize_name(name)}/"
    try:
        r = httpx.get(url, timeout=timeout_s, follow_redirects=True,
                      headers={"Accept": "text/html"})
    except httpx.HTTPError as err:
        raise FatalError(f"cannot read the package index at {url}: {err}",
                         hint="pass --index-url (a PEP 503 simple index this host can reach)"
                         ) from None
    if r.status_code == 404:
        return []
    if r.status_code != 200:
        raise FatalError(f"the package index answered {r.status_code} for {url}",
                         hint="pass --index-url (a PEP 503 simple index)")
    found: set[Version] = set()
    for attrs, text in ANCHOR.findall(r.text):
        if "data-yanked" in attrs:
            continue
        v = _version(html.unescape(text).strip())
        if v is not None:
            found.add(v)
    return sorted(found)


def between(all_versions: list[Version], old: Version, new: Version) -> list[Version]:
    """Versions in (old, new] (or (new, old] for a downgrade), in the order from old to new."""
    if new >= old:
        return [v for v in all_versions if old < v <= new]
    return sorted((v for v in all_versions if new <= v < old), reverse=True)


def index_from_args(install_args: list[str]) -> str | None:
    """The ``--index-url`` of a build's install arguments, if any."""
    for i, a in enumerate(install_args):
        if a in ("--index-url", "-i") and i + 1 < len(install_args):
            return install_args[i + 1]
        if a.startswith("--index-url="):
            return a.split("=", 1)[1]
    return None
