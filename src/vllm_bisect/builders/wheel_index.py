"""vLLM's per-commit wheel index (``https://wheels.vllm.ai``), read through metadata.json.

Layout (vLLM's docs/contributing/ci/nightly_builds.md): ``<base>/<sha>/vllm-*.whl`` holds the
wheels; ``<base>/<sha>/vllm/metadata.json`` describes the default variant and
``<base>/<sha>/<variant>/vllm/metadata.json`` the others. Each entry has ``filename``,
``path`` (relative to the metadata.json URL, ``+`` escaped as ``%2B``), ``platform_tag`` and
``version`` (the variant rides in the local version: ``+g<sha9>.cu130``).

Nothing from the index is trusted as a path or a host: ``filename`` must be a plain wheel
file name, ``path`` must stay on the index's origin (redirects too), and a hash the index
gives (``sha256`` in the entry, or a ``#sha256=`` fragment on ``path``) is checked after the
download.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urldefrag, urljoin

import httpx

from vllm_bisect import net
from vllm_bisect.builders.fetch import (
    SHA256,
    check_origin,
    get_same_origin,
    transient,
    wheel_filename,
)
from vllm_bisect.builders.netfail import combined
from vllm_bisect.envinfo import Platform
from vllm_bisect.errors import ArtifactUnavailable, IndexUnavailable, SpecError

VARIANTS = ("auto", "default", "cu129", "cu130", "cpu")
MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(x86_64|aarch64)$")
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
MAX_METADATA_BYTES = 4 << 20


@dataclass(frozen=True)
class WheelEntry:
    filename: str
    url: str
    version: str
    platform_tag: str
    variant: str
    sha256: str | None = None   # when the index gives one


def metadata_url(base: str, commit: str, variant: str) -> str:
    base = base.rstrip("/")
    return (f"{base}/{commit}/vllm/metadata.json" if variant == "default"
            else f"{base}/{commit}/{variant}/vllm/metadata.json")


def platform_fits(tag: str, p: Platform) -> bool:
    """Does a wheel's platform tag run here (arch and glibc)? Compound tags are split on '.'."""
    for one in tag.split("."):
        m = MANYLINUX.match(one)
        if m:
            need, arch = (int(m.group(1)), int(m.group(2))), m.group(3)
        else:
            legacy, _, arch = one.partition("_")
            if legacy not in LEGACY:
                if one in ("any", f"linux_{p.arch}"):
                    return True
                continue
            need = LEGACY[legacy]
        if arch == p.arch and (p.glibc is None or p.glibc >= need):
            return True
    return False


def fetch_entries(client: httpx.Client, base: str, commit: str, variant: str,
                  deadline_s: float = 120.0) -> list[WheelEntry]:
    url = metadata_url(base, commit, variant)
    with get_same_origin(client, url, base, deadline_s, what="the wheel index") as (r, dog):
        if r.status_code in (403, 404):
            raise ArtifactUnavailable(
                f"no {variant} wheels for {commit[:12]} ({r.status_code} at {url})",
                hint="wheels appear about an hour after merge; not every variant exists "
                     "for every commit")
        if r.status_code != 200:
            error = IndexUnavailable if transient(r.status_code) else ArtifactUnavailable
            raise error(f"wheel index answered HTTP {r.status_code} for {url}")
        try:
            body = net.read(r, dog, MAX_METADATA_BYTES)
        except net.TooLarge:
            raise ArtifactUnavailable(f"metadata.json at {url} is larger than "
                                      f"{MAX_METADATA_BYTES} bytes: refused") from None
    try:
        data = json.loads(bytes(body))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        kind = "HTML" if body.lstrip().startswith(b"<") else "a malformed or truncated file"
        raise IndexUnavailable(f"wheel index returned {kind} instead of metadata.json at {url}",
                               hint="the index may be mid-upload; a later run asks again"
                               ) from None
    if not isinstance(data, list):
        raise ArtifactUnavailable(f"metadata.json at {url} is not a list")
    entries = []
    for item in data:
        if not isinstance(item, dict) or item.get("package_name", "vllm") != "vllm":
            continue
        entries.append(_entry(item, url, base, variant))
    return entries


def _entry(item: dict[str, Any], url: str, base: str, variant: str) -> WheelEntry:
    try:
        fields = {k: item[k] for k in ("filename", "path", "version", "platform_tag")}
    except KeyError as err:
        raise ArtifactUnavailable(f"metadata.json at {url} lacks {err}") from None
    if not all(isinstance(v, str) for v in fields.values()):
        raise ArtifactUnavailable(f"metadata.json at {url} has a non-string field: refused")
    filename = fields["filename"]
    wheel_filename(filename)
    target, fragment = urldefrag(urljoin(url, fields["path"]))
    check_origin(target, base, "wheel URL")
    sha = item.get("sha256")
    if sha is None and fragment.startswith("sha256="):
        sha = fragment.removeprefix("sha256=")
    if sha is not None and (not isinstance(sha, str) or not SHA256.match(sha.lower())):
        raise ArtifactUnavailable(f"metadata.json at {url} gives a malformed sha256 for "
                                  f"{filename}: refused")
    return WheelEntry(filename=filename, url=target, version=fields["version"],
                      platform_tag=fields["platform_tag"], variant=variant,
                      sha256=sha.lower() if sha else None)


def choose(client: httpx.Client, base: str, commit: str, variant: str,
           p: Platform, deadline_s: float = 120.0) -> WheelEntry:
    """The wheel for this commit, variant and host; 'auto' tries the host's variant, then default."""
    if variant not in VARIANTS:
        raise SpecError(f"unknown wheel variant {variant!r}",
                        hint=f"build.variant is one of {', '.join(VARIANTS)}")
    order = [p.variant, "default"] if variant == "auto" else [variant]
    reasons = []
    failed: list[ArtifactUnavailable] = []  # a variant's final answer, or "not now"
    for v in dict.fromkeys(order):
        try:
            entries = fetch_entries(client, base, commit, v, deadline_s)
        except ArtifactUnavailable as err:
            reasons.append(err.message)
            failed.append(err)
            continue
        fitting = [e for e in entries if platform_fits(e.platform_tag, p)]
        if fitting:
            return fitting[0]
        tags = ", ".join(sorted({e.platform_tag for e in entries})) or "none"
        reasons.append(f"no {v} wheel for {p.arch} glibc "
                       f"{'.'.join(map(str, p.glibc or ()))} at {commit[:12]} (have: {tags})")
    error = combined(failed)
    final = error is ArtifactUnavailable
    raise error("; ".join(reasons), hint="try another variant, the image builder, or a source "
                "build" + ("" if final else "; the index did not answer: a later run asks again"))


def has_wheel_fn(base: str, variant: str, p: Platform | None = None,
                 client: httpx.Client | None = None) -> Callable[[str], bool]:
    """A cached predicate: does the index have a wheel for this commit and host?"""
    from vllm_bisect.envinfo import detect

    plat = p or detect()
    http = client or net.client(timeout=30.0)
    seen: dict[str, bool] = {}

    def has(commit: str) -> bool:
        if commit in seen:
            return seen[commit]
        try:
            choose(http, base, commit, variant, plat)
        except ArtifactUnavailable as err:
            if err.final:  # a 5xx or a timeout is asked again
                seen[commit] = False
            return False
        seen[commit] = True
        return True

    return has
