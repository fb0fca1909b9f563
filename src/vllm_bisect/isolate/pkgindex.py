"""The versions of a package that a PEP 503 simple index offers (wheels and sdists, yanked
files left out), and which of them lie between two pins."""

from __future__ import annotations

import html
import re
from collections.abc import Callable

import httpx
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from vllm_bisect import net
from vllm_bisect.errors import FatalError

ANCHOR = re.compile(r"<a\s+([^>]*)>([^<]*)</a>", re.I)
PYPI = "https://pypi.org/simple"
MAX_PAGE_BYTES = 32 << 20  # PyPI's largest simple pages (boto3, all its files) are a few MB


def _version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def _same_origin(index_url: str) -> Callable[[str], None]:
    def check(url: str) -> None:
        if net.origin(url) is None or net.origin(url) != net.origin(index_url):
            raise FatalError(f"the package index at {index_url} redirects to {url[:200]}, "
                             "another origin: refused",
                             hint="pass --index-url with the index's own address")
    return check


def page(index_url: str, name: str, timeout_s: float = 30.0, deadline_s: float = 120.0,
         max_bytes: int = MAX_PAGE_BYTES) -> str | None:
    """The project's simple page (None: the index has no such project), read through the
    shared bounded client: within ``deadline_s`` in all, at most ``max_bytes``, redirects
    only within the index's origin (the wheel builder's rules)."""
    url = f"{index_url.rstrip('/')}/{canonicalize_name(name)}/"
    hint = "pass --index-url (a PEP 503 simple index this host can reach)"
    if url.startswith("file://"):   # a static tree (`vllm-bisect sim history --study deps`)
        return _file_page(url, max_bytes)
    try:
        with net.client(timeout=timeout_s) as http:
            status, body = net.get(http, url, deadline_s=deadline_s, max_bytes=max_bytes,
                                   on_redirect=_same_origin(index_url),
                                   headers={"Accept": "text/html"})
    except net.DeadlineExceeded:
        raise FatalError(f"the package index did not answer {url} within {deadline_s:.0f} s",
                         hint=hint) from None
    except net.NetLimitError as err:
        raise FatalError(f"the package index's page {url} is {err}: refused", hint=hint
                         ) from None
    except httpx.HTTPError as err:
        raise FatalError(f"cannot read the package index at {url}: {err}", hint=hint) from None
    if status == 404:
        return None
    if status != 200:
        raise FatalError(f"the package index answered {status} for {url}",
                         hint="pass --index-url (a PEP 503 simple index)")
    return body.decode("utf-8", errors="replace")


def _file_page(url: str, max_bytes: int) -> str | None:
    """A ``file://`` index's project page: ``<dir>/index.html`` (None: no such project)."""
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    f = Path(unquote(urlparse(url).path)) / "index.html"
    try:
        if f.stat().st_size > max_bytes:
            raise FatalError(f"the package index's page {f} is over {max_bytes} bytes: refused")
        return f.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as err:
        raise FatalError(f"cannot read the package index's page {f}: {err.strerror}",
                         hint="pass --index-url (a PEP 503 simple index)") from None


def versions(index_url: str, name: str, timeout_s: float = 30.0, deadline_s: float = 120.0,
             max_bytes: int = MAX_PAGE_BYTES) -> list[Version]:
    """Every version of ``name`` on the index, oldest first."""
    body = page(index_url, name, timeout_s, deadline_s, max_bytes)
    if body is None:
        return []
    found: set[Version] = set()
    for attrs, text in ANCHOR.findall(body):
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
