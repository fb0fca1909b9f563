"""net.client's TLS context: made once per process and shared by every client (httpx makes a
new one per client, ~40 ms of CPU each: a health poll, a probe and a /metrics read each paid
it), still verifying, and one per CA setting (SSL_CERT_FILE)."""

from __future__ import annotations

import ssl
from pathlib import Path

import certifi
import pytest

from vllm_bisect import net


def _context(client: object) -> ssl.SSLContext:
    return client._transport._pool._ssl_context  # type: ignore[attr-defined]


def test_clients_share_one_verifying_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with net.client() as a, net.client(timeout=5.0) as b:
        ctx = _context(a)
        assert ctx is _context(b) is net.tls_context()
    assert ctx.verify_mode is ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.get_ca_certs() or ctx.cert_store_stats()["x509_ca"] > 0
    with net.client(verify=False) as c:  # an explicit choice is kept
        assert _context(c).verify_mode is ssl.CERT_NONE


def test_a_ca_bundle_from_the_environment_gets_its_own_context(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    default = net.tls_context()
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    with net.client() as a:
        assert _context(a) is net.tls_context() is not default
