"""isolate's PEP 503 client (what `deps` bisects package versions with) against a hostile
index (real HTTP servers on 127.0.0.1): the wheel builder's rules through the one shared
bounded client: a page over the cap is refused, a dripping page ends at the deadline, a
redirect to another origin is never followed, one within the origin is."""

from __future__ import annotations

import time

import pytest

from tests.builders.hostile_index import Route, RouteServer
from vllm_bisect.errors import FatalError
from vllm_bisect.isolate import pkgindex

PAGE = b'<a href="tinydep-1.0.tar.gz">tinydep-1.0.tar.gz</a>\n'


def test_a_huge_page_is_refused_not_read_whole() -> None:
    with RouteServer() as srv:
        srv.routes["/tinydep/"] = Route(PAGE * (50_000_000 // len(PAGE)))  # 50 MB
        with pytest.raises(FatalError, match="larger than 33554432 bytes"):
            pkgindex.versions(srv.url, "tinydep")
        srv.routes["/tinydep/"] = Route(PAGE * 1000)
        with pytest.raises(FatalError, match="larger than 1000 bytes"):
            pkgindex.versions(srv.url, "tinydep", max_bytes=1000)
        assert [str(v) for v in pkgindex.versions(srv.url, "tinydep")] == ["1.0"]


def test_a_dripping_page_ends_at_the_deadline() -> None:
    with RouteServer() as srv:
        srv.routes["/tinydep/"] = Route(PAGE, drip_s=0.5, length=100_000)
        started = time.monotonic()
        with pytest.raises(FatalError, match="within 2 s"):
            pkgindex.versions(srv.url, "tinydep", deadline_s=2.0)
        assert time.monotonic() - started < 60
        srv.routes["/tinydep/"] = Route(header_drip_s=0.5)
        with pytest.raises(FatalError, match="within 2 s"):
            pkgindex.versions(srv.url, "tinydep", deadline_s=2.0)


def test_a_redirect_to_another_origin_is_not_followed() -> None:
    with RouteServer() as index, RouteServer() as other:
        other.routes["/tinydep/"] = Route(PAGE)
        index.routes["/tinydep/"] = Route(status=302,
                                          headers={"Location": f"{other.url}/tinydep/"})
        with pytest.raises(FatalError, match="another origin: refused"):
            pkgindex.versions(index.url, "tinydep")
        assert other.hits == []
        index.routes["/tinydep/"] = Route(status=302, headers={"Location": "/files/tinydep/"})
        index.routes["/files/tinydep/"] = Route(PAGE)
        assert [str(v) for v in pkgindex.versions(index.url, "tinydep")] == ["1.0"]
