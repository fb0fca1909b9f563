"""HTTP GETs that never leave the wheel index's origin, redirects included.

The index decides which URL a wheel comes from (``path`` in metadata.json); a tampered or
compromised index must not be able to send the builder to another host, nor to a file
outside the cache (:func:`wheel_filename`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from urllib.parse import urljoin, urlsplit

import httpx

from vllm_bisect.errors import ArtifactUnavailable

MAX_REDIRECTS = 5
# PEP 427: {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl, each part a safe token
WHEEL_FILENAME = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)(?:-(?P<build>\d[A-Za-z0-9_]*))?"
    r"-(?P<py>[A-Za-z0-9_.]+)-(?P<abi>[A-Za-z0-9_.]+)-(?P<plat>[A-Za-z0-9_.]+)\.whl$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL (default ports filled in)."""
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ArtifactUnavailable(f"not an http(s) URL: {url[:200]}")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise ArtifactUnavailable(f"bad port in URL: {url[:200]}") from None
    return u.scheme, u.hostname.lower(), port


def check_origin(url: str, index_url: str, what: str) -> None:
    if origin(url) != origin(index_url):
        raise ArtifactUnavailable(
            f"{what} {url[:200]} is not on the wheel index's origin "
            f"({'://'.join(origin(index_url)[:2])}:{origin(index_url)[2]}): refused",
            hint="the index (or something between) points elsewhere; wheels are only "
                 "fetched from build.index_url's host")


def wheel_filename(name: str) -> re.Match[str]:
    """A wheel filename from the index, checked to be one plain, well-formed file name."""
    m = WHEEL_FILENAME.match(name)
    if m is None or name.startswith(".") or "/" in name or "\\" in name:
        raise ArtifactUnavailable(f"the index names a wheel {name[:200]!r} that is not a plain "
                                  "wheel file name: refused",
                                  hint="the index is broken or tampered with; this commit is "
                                       "skipped")
    return m


@contextlib.contextmanager
def get_same_origin(client: httpx.Client, url: str, index_url: str,
                    timeout: float | None = None) -> Iterator[httpx.Response]:
    """GET url as a streamed response, following redirects only within the index's origin."""
    for _ in range(MAX_REDIRECTS + 1):
        check_origin(url, index_url, "URL")
        req = (client.build_request("GET", url) if timeout is None
               else client.build_request("GET", url, timeout=timeout))
        r = client.send(req, stream=True, follow_redirects=False)
        if not r.is_redirect:
            try:
                yield r
            finally:
                r.close()
            return
        location = r.headers.get("location", "")
        r.close()
        url = urljoin(url, location)
        check_origin(url, index_url, "redirect to")
    raise ArtifactUnavailable(f"more than {MAX_REDIRECTS} redirects from the index at {url}")
