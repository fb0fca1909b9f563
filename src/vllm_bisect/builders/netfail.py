"""What a tool's output says when the network failed, read once where a builder ran the tool.

A builder runs programs whose failures come only as text: pip and uv (a wheel's install, a
source build resolving its requirements), the docker daemon (a pull). When that text names a
network error, the builder raises :class:`~vllm_bisect.errors.NetworkUnavailable` instead of
its usual error, and from there on the cause travels as a type (the evaluation's ``network``,
the endpoint hint, the result cache that keeps no network failure): nothing later reads the
reason text again. The patterns are what pip (urllib3), uv (reqwest) and dockerd print, e.g.
uv's ``Connection refused (os error 111)`` and pip's ``Max retries exceeded``.
"""

from __future__ import annotations

import re
from pathlib import Path

from vllm_bisect.errors import ArtifactUnavailable, IndexUnavailable, NetworkUnavailable

NETWORK_TEXT = re.compile(
    r"connection (?:refused|reset|aborted)|name resolution|could not resolve|resolve host|"
    r"network is unreachable|no route to host|temporary failure in name|dns error|"
    r"failed to establish a new connection|max retries exceeded|connecterror|connecttimeout|"
    r"readtimeout|remotedisconnected|error sending request|tcp connect error|"
    r"os error 10[14]|os error 11[01]|errno 10[14]|errno 11[01]|\\bssl(?:error)?[:(]|"
    r"certificate verify failed|proxy error|tls handshake timeout|i/o timeout",
    re.IGNORECASE)


def network_failure(text: str) -> bool:
    """Does this output of pip, uv or docker name a network error?"""
    return bool(NETWORK_TEXT.search(text))


def network_error(message: str, output: str, *, hint: str = "", log_tail: str = "",
                  log: Path | None = None) -> NetworkUnavailable | None:
    """The error to raise instead of the builder's own when ``output`` names a network
    error; None otherwise."""
    if not network_failure(output):
        return None
    return NetworkUnavailable(
        f"{message}: the network failed",
        hint="check the network (the index, a proxy, DNS) and run the same command again: "
             "a network failure is not cached as the commit's result" + (
                 f"; {hint}" if hint else ""),
        log_tail=log_tail, log=log)


def combined(failures: list[ArtifactUnavailable]) -> type[ArtifactUnavailable]:
    """The error for several tries that all failed (tags, variants): a network failure if the
    network kept one of them from us, "not now" if one was, else the final "none"."""
    if any(isinstance(e, NetworkUnavailable) for e in failures):
        return NetworkUnavailable
    if any(not e.final for e in failures):
        return IndexUnavailable
    return ArtifactUnavailable
