"""vLLM's per-commit wheel index (``https://wheels.vllm.ai``), read through metadata.json.

Layout (vLLM's docs/contributing/ci/nightly_builds.md): ``<base>/<sha>/vllm-*.whl`` holds the
wheels; ``<base>/<sha>/vllm/metadata.json`` describes the default variant and
``<base>/<sha>/<variant>/vllm/metadata.json`` the others. Each entry has ``filename``,
``path`` (relative to the metadata.json URL, ``+`` escaped as ``%2B``), ``platform_tag`` and
``version`` (the variant rides in the local version: ``+g<sha9>.cu130``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx

from vllm_bisect.envinfo import Platform
from vllm_bisect.errors import ArtifactUnavailable, SpecError

VARIANTS = ("auto", "default", "cu129", "cu130", "cpu")
MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(x86_64|aarch64)$")
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


@dataclass(frozen=True)
class WheelEntry:
    filename: str
    url: str
    version: str
    platform_tag: str
    variant: str


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


def fetch_entries(client: httpx.Client, base: str, commit: str, variant: str) -> list[WheelEntry]:
    url = metadata_url(base, commit, variant)
    try:
        r = client.get(url, timeout=60.0, follow_redirects=True)
    except httpx.HTTPError as err:
        raise ArtifactUnavailable(f"wheel index unreachable: {url}: {err}",
                                  hint="check build.index_url and the network") from None
    if r.status_code in (403, 404):
        raise ArtifactUnavailable(f"no {variant} wheels for {commit[:12]} ({r.status_code} at {url})",
                                  hint="wheels appear about an hour after merge; not every "
                                       "variant exists for every commit")
    if r.status_code != 200:
        raise ArtifactUnavailable(f"wheel index answered HTTP {r.status_code} for {url}")
    try:
        data = r.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        kind = "HTML" if r.text.lstrip().startswith("<") else "a malformed or truncated file"
        raise ArtifactUnavailable(f"wheel index returned {kind} instead of metadata.json at {url}",
                                  hint="the index may be mid-upload; retry later") from None
    if not isinstance(data, list):
        raise ArtifactUnavailable(f"metadata.json at {url} is not a list")
    entries = []
    for item in data:
        if not isinstance(item, dict) or item.get("package_name", "vllm") != "vllm":
            continue
        try:
            entries.append(WheelEntry(filename=str(item["filename"]),
                                      url=urljoin(url, str(item["path"])),
                                      version=str(item["version"]),
                                      platform_tag=str(item["platform_tag"]), variant=variant))
        except KeyError as err:
            raise ArtifactUnavailable(f"metadata.json at {url} lacks {err}") from None
    return entries


def choose(client: httpx.Client, base: str, commit: str, variant: str,
           p: Platform) -> WheelEntry:
    """The wheel for this commit, variant and host; 'auto' tries the host's variant, then default."""
    if variant not in VARIANTS:
        raise SpecError(f"unknown wheel variant {variant!r}",
                        hint=f"build.variant is one of {', '.join(VARIANTS)}")
    order = [p.variant, "default"] if variant == "auto" else [variant]
    reasons = []
    for v in dict.fromkeys(order):
        try:
            entries = fetch_entries(client, base, commit, v)
        except ArtifactUnavailable as err:
            reasons.append(err.message)
            continue
        fitting = [e for e in entries if platform_fits(e.platform_tag, p)]
        if fitting:
            return fitting[0]
        tags = ", ".join(sorted({e.platform_tag for e in entries})) or "none"
        reasons.append(f"no {v} wheel for {p.arch} glibc "
                       f"{'.'.join(map(str, p.glibc or ()))} at {commit[:12]} (have: {tags})")
    raise ArtifactUnavailable("; ".join(reasons), hint="try another variant, the image builder, "
                              "or a source build")


def has_wheel_fn(base: str, variant: str, p: Platform | None = None,
                 client: httpx.Client | None = None) -> Callable[[str], bool]:
    """A cached predicate: does the index have a wheel for this commit and host?"""
    from vllm_bisect.envinfo import detect

    plat = p or detect()
    http = client or httpx.Client(timeout=30.0)
    seen: dict[str, bool] = {}

    def has(commit: str) -> bool:
        if commit not in seen:
            try:
                choose(http, base, commit, variant, plat)
                seen[commit] = True
            except ArtifactUnavailable:
                seen[commit] = False
        return seen[commit]

    return has
