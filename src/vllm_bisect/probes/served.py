"""Which model a server serves: its ``/v1/models`` list and the ``model`` field of its stream.

A commit whose serve configuration starts another model (another name, or another model
behind the spec's name), or a server that answers whatever name it is asked for, would be
judged on another model's behaviour: a capped model reads as a length regression, a fast one
as good. Such a server is a :class:`~vllm_bisect.errors.WrongModel` (a skip naming both),
never a verdict.

vLLM lists ``{"id": served name, "root": the model it loaded}`` for each served name (vLLM
0.25.1: ``tests/fixtures/vllm-0.25.1/endpoints_models_version_health.json``) and echoes the
served name in every streamed chunk's ``model``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx

from vllm_bisect import net
from vllm_bisect.errors import ProbeError, SpecError, WrongModel
from vllm_bisect.runtime.base import ServerHandle

MODELS_DEADLINE_S = 10.0
MODELS_MAX_BYTES = 1 << 20
HINT = ("this commit's server serves another model than the spec's serve.model (its serve "
        "configuration, or what runs at the URL): the commit is skipped, never judged")


@dataclass(frozen=True)
class Served:
    """One entry of ``/v1/models``."""

    id: str
    root: str | None
    max_model_len: int | None = None


def listed(client: httpx.Client, server: ServerHandle) -> list[Served] | None:
    """The server's ``/v1/models`` entries; None where it has no such endpoint (404/405:
    only the stream's ``model`` field is checked then). Anything else that is not a list of
    models is a ProbeError."""
    url = f"{server.url}/v1/models"
    try:
        status, body = net.get(client, url, deadline_s=MODELS_DEADLINE_S,
                               max_bytes=MODELS_MAX_BYTES, timeout=MODELS_DEADLINE_S)
    except httpx.ConnectError as err:
        raise ProbeError(f"nothing accepts connections at {server.url} ({err})",
                         hint="is the server running, and is the URL (host and port) "
                              "right?") from None
    except (httpx.HTTPError, net.NetLimitError) as err:
        raise ProbeError(f"{url} could not be read ({type(err).__name__}: {err})",
                         hint="the server does not answer its model list") from None
    if status in (404, 405):
        return None
    if status != 200:
        raise ProbeError(f"{url} answered HTTP {status}",
                         hint="the server does not answer its model list")
    try:
        data = json.loads(body).get("data")
        entries = [Served(id=e["id"], root=e.get("root"), max_model_len=_int(e)) for e in data]
        if not all(isinstance(e.id, str) and (e.root is None or isinstance(e.root, str))
                   for e in entries):
            raise TypeError("an id or root is not a string")
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as err:
        raise ProbeError(f"{url} is not a list of models ({type(err).__name__}: {err})",
                         hint="the server is not speaking vLLM's API") from None
    return entries


def _int(entry: dict[str, object]) -> int | None:
    n = entry.get("max_model_len")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def check_listed(server: ServerHandle, entries: list[Served] | None,
                 max_tokens: int | None = None) -> None:
    """WrongModel unless the list serves the spec's name (and, where the spec names the model
    behind it too, that model); a SpecError when ``max_tokens`` (what the probe sends) is
    above the served model's context, which no request could then fit."""
    if entries is None:
        return
    ids = [e.id for e in entries]
    match = next((e for e in entries if e.id == server.model), None)
    if match is None:
        raise WrongModel(f"the server serves {_names(ids)}, not {server.model!r} (the spec's "
                         "serve.model or its --served-model-name): skipped, not judged",
                         hint=HINT)
    if server.model_root is not None and match.root not in (None, server.model_root):
        raise WrongModel(f"the server serves {match.root!r} under the name {server.model!r}, "
                         f"not {server.model_root!r} (the spec's serve.model): skipped, not "
                         "judged", hint=HINT)
    if max_tokens is not None and match.max_model_len is not None and (
            max_tokens > match.max_model_len):
        raise SpecError(f"probe.max_tokens = {max_tokens} is above the served model's context "
                        f"({match.max_model_len} tokens, max_model_len in /v1/models): no "
                        "request can be answered", hint="lower probe.max_tokens below the "
                        "model's context (less the prompt's tokens)")


def check(client: httpx.Client, server: ServerHandle, max_tokens: int | None = None) -> None:
    """Read ``/v1/models`` and check it (:func:`listed`, :func:`check_listed`)."""
    check_listed(server, listed(client, server), max_tokens)


def check_stream_model(url: str, server: ServerHandle, model: object) -> None:
    """A streamed chunk's ``model`` field: absent is accepted, another name is WrongModel."""
    if model is None or model == server.model:
        return
    raise WrongModel(f"the stream from {url} is of model {str(model)[:200]!r}, not "
                     f"{server.model!r} (the spec's serve.model): skipped, not judged",
                     hint=HINT)


def _names(ids: list[str]) -> str:
    if not ids:
        return "no model"
    return ", ".join(repr(i[:200]) for i in ids[:5]) + (" ..." if len(ids) > 5 else "")
