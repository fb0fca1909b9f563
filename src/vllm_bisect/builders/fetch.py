"""HTTP GETs that never leave the wheel index's origin, redirects included.

The index decides which URL a wheel comes from (``path`` in metadata.json); a tampered or
compromised index must not be able to send the builder to another host, nor to a file
outside the cache (:func:`wheel_filename`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import httpx

from vllm_bisect import net
from vllm_bisect.errors import ArtifactUnavailable, IndexUnavailable, NetworkUnavailable

# PEP 427: {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl, each part a safe token
WHEEL_FILENAME = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)(?:-(?P<build>\d[A-Za-z0-9_]*))?"
    r"-(?P<py>[A-Za-z0-9_.]+)-(?P<abi>[A-Za-z0-9_.]+)-(?P<plat>[A-Za-z0-9_.]+)\.whl$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL (default ports filled in)."""
    o = net.origin(url)
    if o is None:
        raise ArtifactUnavailable(f"not an http(s) URL (or a bad port): {url[:200]}")
    return o


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


def transient(status: int) -> bool:
    """Does an HTTP status say "not now" (a later run may get an answer)?"""
    return status >= 500 or status in (408, 429)


@contextlib.contextmanager
def get_same_origin(client: httpx.Client, url: str, index_url: str, deadline_s: float,
                    what: str = "the index") -> Iterator[tuple[httpx.Response, net.Watchdog]]:
    """GET url as a streamed response within ``deadline_s`` in all, following redirects only
    within the index's origin. A deadline or a network error is an IndexUnavailable (a later
    run asks again); the body is read with :func:`vllm_bisect.net.iter_bytes`."""
    check_origin(url, index_url, "URL")
    try:
        with net.stream(client, "GET", url, deadline_s=deadline_s,
                        on_redirect=lambda u: check_origin(u, index_url, "redirect to")) as got:
            yield got
    except net.DeadlineExceeded:
        raise IndexUnavailable(f"{what} did not answer within {deadline_s:.0f} s: {url[:200]}",
                               hint="the index is slow or stalled; a later run asks again"
                               ) from None
    except net.TooManyRedirects as err:
        raise ArtifactUnavailable(f"{err} from {what}: {url[:200]}") from None
    except httpx.HTTPError as err:  # a transport error: httpx raises no status as one here
        raise NetworkUnavailable(f"{what} unreachable: {url[:200]}: {err}",
                               hint="check build.index_url and the network; a later run "
                                    "asks again") from None
