"""The decode probe: stream requests, time every output chunk, count tokens the server's way.

Per request, ``itl_ms = (t_last_chunk - t_first_chunk) / (completion_tokens - 1)`` uses the
server-counted ``usage.completion_tokens``. Under speculative decoding one chunk carries
several tokens, so ``chunk_itl_ms`` (the mean gap between chunks, what a naive client
reports) is larger by about the acceptance length: the #47297 trap. Both are reported.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from vllm_bisect import net
from vllm_bisect.errors import ProbeError, StreamFormatError
from vllm_bisect.models import Measurement, RequestResult, TokensSource
from vllm_bisect.probes import metrics, served
from vllm_bisect.probes.counts import StreamCounts, check_counts
from vllm_bisect.probes.limits import split_lines
from vllm_bisect.probes.prompt import PromptSizer, SizedPrompt, check_prompt_tokens
from vllm_bisect.probes.sse import (
    chunk_text,
    completion_tokens,
    finish_reason,
    has_choice,
    iter_events,
)
from vllm_bisect.probes.sse import (
    prompt_tokens as usage_prompt_tokens,
)
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import Endpoint, OpsSpec, ProbeSpec, output_token_floor
from vllm_bisect.text import plural

logger = logging.getLogger(__name__)
# a warm-up request's length (it only has to run the server's first-use paths)
WARMUP_MAX_TOKENS = 32

UNBOUNDED_TOKENS = 1 << 24  # the count bound when no max_tokens is sent
VERSION_DEADLINE_S = 10.0   # /version: a few bytes of JSON
VERSION_MAX_BYTES = 64 << 10

# Server log lines that explain a length cap (vLLM has worded these a few ways).
NOTE_PATTERNS = (
    re.compile(r"Default (?:vLLM )?sampling param(?:eter)?s have been overridden by the model's[^\n]*"),
    re.compile(r"Using default (?:chat |completion |chat/completion )?sampling params from model[^\n]*"),
)


@dataclass(frozen=True)
class _Chunk:
    t: float
    tokens: int | None  # from continuous usage, else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _median_int(xs: list[int | None]) -> int | None:
    got = [x for x in xs if x is not None]
    return int(statistics.median_low(got)) if got else None


class DecodeProbe:
    """``measure(server) -> Measurement`` over HTTP; no other I/O."""

    def __init__(self, spec: ProbeSpec, min_output_tokens: int | None = None,
                 on_request: Callable[[int, int], None] | None = None, *,
                 ops: OpsSpec | None = None) -> None:
        self.spec = spec
        self.ops = ops or OpsSpec()  # its request timeout and deadline
        self.min_output_tokens = (min_output_tokens if min_output_tokens is not None
                                  else spec.effective_min_tokens())
        self.on_request = on_request
        self.sizer = PromptSizer(spec.prompt) if spec.prompt_tokens is not None else None

    # -- request -----------------------------------------------------------------------
    def request_body(self, model: str, max_tokens: int | None,
                     prompt: str | None = None) -> dict[str, Any]:
        s = self.spec
        text = s.prompt if prompt is None else prompt
        body: dict[str, Any] = {"model": model, "stream": True, "temperature": s.temperature,
                                "stream_options": {"include_usage": True,
                                                   "continuous_usage_stats": True}}
        if s.endpoint is Endpoint.CHAT:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if s.ignore_eos:
            body["ignore_eos"] = True
        min_tokens = output_token_floor(s.min_tokens, max_tokens)
        if min_tokens:
            body["min_tokens"] = min(min_tokens, max_tokens) if max_tokens else min_tokens
        return body

    def _path(self) -> str:
        return "/v1/chat/completions" if self.spec.endpoint is Endpoint.CHAT else "/v1/completions"

    def run_one(self, client: httpx.Client, server: ServerHandle,
                body: dict[str, Any]) -> RequestResult:
        """One streamed request, within the spec's total deadline; anything the server sends
        that does not fit vLLM's format is a ProbeError (the commit is skipped)."""
        url = server.url + self._path()
        chunks: list[_Chunk] = []
        text = hashlib.sha256()
        final_usage: int | None = None
        prompt_tokens: int | None = None
        finish: str | None = None
        saw_done = saw_choice = False
        counts = StreamCounts()
        max_tokens = body.get("max_tokens")
        bound = max_tokens if isinstance(max_tokens, int) else UNBOUNDED_TOKENS
        deadline_s = self.ops.deadline_s(max_tokens if isinstance(max_tokens, int) else None)
        t0 = time.perf_counter()
        timeout = httpx.Timeout(30.0, read=min(self.ops.request_timeout_s, deadline_s))
        try:  # the deadline covers the response headers too (a server may drip them)
            with net.stream(client, "POST", url, deadline_s=deadline_s, json=body,
                            timeout=timeout) as (r, dog):
                if r.status_code != 200:
                    detail = bytearray()
                    for piece in net.iter_bytes(r, dog):
                        detail += piece
                        if len(detail) > 300:
                            break
                    raise ProbeError(f"{url} answered HTTP {r.status_code}: "
                                     f"{detail[:300].decode(errors='replace')}",
                                     hint="check the model name and the serve arguments")
                last_cum = 0
                lines = split_lines(net.iter_bytes(r, dog))
                for ev in iter_events(lines):
                    if ev.data is None:
                        saw_done = True
                        break
                    served.check_stream_model(url, server, ev.data.get("model"))
                    choice = has_choice(ev.data)
                    saw_choice = choice or saw_choice
                    out_text = chunk_text(ev.data)
                    finish = finish_reason(ev.data) or finish
                    cum = completion_tokens(ev.data, bound)
                    prompt_tokens = usage_prompt_tokens(ev.data) or prompt_tokens
                    if not ev.data.get("choices") and cum is not None:
                        final_usage = cum
                        continue
                    if choice:
                        counts.on_choice(cum)
                    if out_text is None:
                        continue
                    counts.text_chunks += 1
                    text.update(out_text.encode())
                    n = None
                    if cum is not None:
                        if cum < last_cum:
                            raise StreamFormatError(
                                f"usage.completion_tokens went down ({last_cum} -> {cum})")
                        n, last_cum = cum - last_cum, cum
                    chunks.append(_Chunk(ev.t, n))
                    if len(chunks) > bound:
                        raise StreamFormatError(
                            f"stream from {url} sent more than {bound} output chunks "
                            "(more than max_tokens)", hint="the server does not stop")
        except net.DeadlineExceeded:
            raise self._deadline_error(url, deadline_s, chunks) from None
        except httpx.TimeoutException:
            raise ProbeError(f"request to {url} timed out after {timeout.read:.0f} s",
                             hint="the server hangs; raise ops.request_timeout_s if it is slow") from None
        except httpx.ConnectError as err:
            raise ProbeError(f"nothing accepts connections at {server.url} ({err})",
                             hint="is the server running, and is the URL (host and port) "
                                  "right?") from None
        except httpx.HTTPError as err:
            raise ProbeError(f"stream from {url} broke after {plural(len(chunks), 'chunk')}: {err}",
                             hint="the server died mid-request; see its log") from None
        if not saw_done:
            raise StreamFormatError(f"stream from {url} ended after {plural(len(chunks), 'chunk')} "
                                    "without 'data: [DONE]'", hint="the server died mid-request")
        if not saw_choice:  # never "0 output tokens": that would judge a length bisect
            raise StreamFormatError(f"stream from {url} carried no well-formed choice",
                                    hint="the server is not speaking vLLM's streaming format")
        check_counts(url, final_usage, counts)  # (a stream that contradicts itself)
        try:
            result = self._summarize(chunks, final_usage, finish, t0)
        except ValidationError as err:
            raise StreamFormatError(f"stream from {url} gave an unusable result: "
                                    f"{err.errors()[0]['msg']}") from None
        return result.model_copy(update={"text_sha256": text.hexdigest(),
                                         "prompt_tokens": prompt_tokens})

    @staticmethod
    def _deadline_error(url: str, deadline_s: float, chunks: list[_Chunk]) -> ProbeError:
        return ProbeError(f"request to {url} did not finish within its {deadline_s:.0f} s "
                          f"deadline ({plural(len(chunks), 'chunk')} received)",
                          hint="the server streams without end or far too slowly; set "
                               "ops.request_deadline_s (or lower ops.min_tokens_per_s) "
                               "if it is just slow")

    @staticmethod
    def _summarize(chunks: list[_Chunk], final_usage: int | None, finish: str | None,
                   t0: float) -> RequestResult:
        n_chunks = len(chunks)
        continuous = [c.tokens for c in chunks]
        if final_usage is not None:
            tokens, source = final_usage, TokensSource.USAGE
        elif chunks and all(c is not None for c in continuous):
            tokens, source = sum(c for c in continuous if c is not None), TokensSource.CONTINUOUS
        else:
            tokens, source = n_chunks, TokensSource.CHUNKS
        chunk_tokens = ([c for c in continuous if c is not None]
                        if all(c is not None for c in continuous) and chunks else None)
        if not chunks:
            return RequestResult(output_tokens=tokens, finish_reason=finish, ttft_ms=0.0,
                                 latency_ms=0.0, itl_ms=None, chunk_itl_ms=None, tpot_ms=None,
                                 n_chunks=0, tokens_per_chunk=0.0, chunk_tokens=chunk_tokens,
                                 tokens_source=source)
        t_first, t_last = chunks[0].t, chunks[-1].t
        span_ms = (t_last - t_first) * 1000.0
        itl = span_ms / (tokens - 1) if tokens > 1 else None
        chunk_itl = span_ms / (n_chunks - 1) if n_chunks > 1 else None
        ttft = (t_first - t0) * 1000.0
        latency = (t_last - t0) * 1000.0
        tpot = (latency - ttft) / (tokens - 1) if tokens > 1 else None
        return RequestResult(output_tokens=tokens, finish_reason=finish, ttft_ms=ttft,
                             latency_ms=latency, itl_ms=itl, chunk_itl_ms=chunk_itl, tpot_ms=tpot,
                             n_chunks=n_chunks, tokens_per_chunk=tokens / n_chunks,
                             chunk_tokens=chunk_tokens, tokens_source=source)

    # -- measurement -------------------------------------------------------------------
    def _warm(self, client: httpx.Client, server: ServerHandle, body: dict[str, Any],
              max_tokens: int | None, n: int) -> None:
        """``n`` warm-up requests: the probe's body, at most ``WARMUP_MAX_TOKENS`` long."""
        for _ in range(n):
            warm = dict(body)
            if max_tokens is not None:
                warm["max_tokens"] = min(max_tokens, WARMUP_MAX_TOKENS)
                warm.pop("min_tokens", None)
            self.run_one(client, server, warm)

    def _body(self, client: httpx.Client, server: ServerHandle, s: ProbeSpec
              ) -> tuple[dict[str, Any], int | None, SizedPrompt | None]:
        """The request body of spec ``s`` on this server, the max_tokens it sends, and the
        sized prompt it carries (None: probe.prompt as is)."""
        max_tokens = s.max_tokens if s.send_max_tokens else None
        sized = self.sized_prompt(client, server, s.prompt_tokens)
        body = self.request_body(server.model, max_tokens,
                                 sized.text if sized is not None else None)
        return body, max_tokens, sized

    def warm_up(self, server: ServerHandle) -> None:
        """The spec's warm-up requests alone, as :meth:`measure` runs them (``explain`` runs
        them before the profiler starts)."""
        with net.client(timeout=httpx.Timeout(30.0, read=self.ops.request_timeout_s)) as client:
            body, max_tokens, _ = self._body(client, server, self.spec)
            self._warm(client, server, body, max_tokens, self.spec.warmup)

    def measure(self, server: ServerHandle, requests: int | None = None,
                warmup: int | None = None) -> Measurement:
        """One probe run; ``requests``/``warmup`` override the spec (for more samples)."""
        s = self.spec
        if requests is not None or warmup is not None:
            s = s.model_copy(update={k: v for k, v in (("requests", requests), ("warmup", warmup))
                                     if v is not None})
        started = time.perf_counter()
        limits = httpx.Limits(max_connections=s.concurrency + 2)
        timeout = httpx.Timeout(30.0, read=self.ops.request_timeout_s)
        with net.client(limits=limits, timeout=timeout) as client:
            # another model is a skip, never judged; max_tokens over its context, an error
            served.check(client, server, s.sent_max_tokens())
            body, max_tokens, sized = self._body(client, server, s)
            version = self._version(client, server)
            self._warm(client, server, body, max_tokens, s.warmup)
            before = metrics.scrape(client, server.url)
            results = self._run_all(client, server, body, s.requests)
            after = metrics.scrape(client, server.url)
        delta = metrics.diff(before, after) if before is not None and after is not None else None
        if sized is not None:
            check_prompt_tokens(sized, [r.prompt_tokens for r in results])
        return self._aggregate(server, version, max_tokens, results, delta,
                               time.perf_counter() - started)

    def sized_prompt(self, client: httpx.Client, server: ServerHandle,
                     target: int | None) -> SizedPrompt | None:
        """The prompt of about ``target`` tokens for this server (None: probe.prompt as is)."""
        if target is None:
            return None
        if self.sizer is None:
            self.sizer = PromptSizer(self.spec.prompt)
        return self.sizer.build(client, server.url, server.model, self.spec.endpoint, target)

    def _run_all(self, client: httpx.Client, server: ServerHandle,
                 body: dict[str, Any], requests: int) -> list[RequestResult]:
        s = self.spec
        done = 0

        def one(_: int) -> RequestResult:
            nonlocal done
            res = self.run_one(client, server, body)
            done += 1
            if self.on_request is not None:
                self.on_request(done, requests)
            return res

        if s.concurrency == 1:
            return [one(i) for i in range(requests)]
        with ThreadPoolExecutor(max_workers=s.concurrency) as pool:
            return list(pool.map(one, range(requests)))

    @staticmethod
    def _version(client: httpx.Client, server: ServerHandle) -> str | None:
        """The server's version, or None (a /version that is slow, huge or garbled is not
        a reason to skip the commit, and is not waited for or read whole)."""
        try:
            status, body = net.get(client, f"{server.url}/version", deadline_s=VERSION_DEADLINE_S,
                                   max_bytes=VERSION_MAX_BYTES, timeout=VERSION_DEADLINE_S)
            v = json.loads(body).get("version") if status == 200 else None
            return str(v)[:200] if v is not None else None
        except (httpx.HTTPError, net.NetLimitError, ValueError, AttributeError, RecursionError):
            return None

    def _aggregate(self, server: ServerHandle, version: str | None, max_tokens: int | None,
                   results: list[RequestResult], delta: metrics.MetricsDelta | None,
                   wall_s: float) -> Measurement:
        outs = [r.output_tokens for r in results]
        floor = self.min_output_tokens
        sources = {r.tokens_source for r in results}
        source = (TokensSource.CHUNKS if TokensSource.CHUNKS in sources
                  else TokensSource.CONTINUOUS if TokensSource.CONTINUOUS in sources
                  else TokensSource.USAGE)
        return Measurement(
            endpoint=self.spec.endpoint.value, model=server.model, server_version=version,
            requested_tokens=max_tokens, min_output_tokens=floor, output_tokens=outs,
            length_ok=all(o >= floor for o in outs) if floor is not None else True,
            itl_ms=_median([r.itl_ms for r in results if r.itl_ms is not None]),
            chunk_itl_ms=_median([r.chunk_itl_ms for r in results if r.chunk_itl_ms is not None]),
            tokens_per_chunk=_median([r.tokens_per_chunk for r in results if r.n_chunks]),
            ttft_ms=_median([r.ttft_ms for r in results if r.n_chunks]),
            tpot_ms=_median([r.tpot_ms for r in results if r.tpot_ms is not None]),
            finish_reasons=[r.finish_reason for r in results],
            acceptance_length=delta.acceptance_length if delta else None,
            acceptance_per_position=delta.acceptance_per_position if delta else None,
            server_itl_ms=delta.server_itl_ms if delta else None,
            generation_tokens_delta=delta.generation_tokens if delta else None,
            tokens_source=source, requests=results,
            notes=[*log_notes(server.read_log()), *(delta.unavailable if delta else ())],
            wall_s=wall_s,
            prompt_tokens=_median_int([r.prompt_tokens for r in results]),
        )


def combine(first: Measurement, more: Measurement) -> Measurement:
    """One measurement from two probe runs on the same server (medians over all requests;
    the /metrics deltas of the first run are kept)."""
    reqs = [*first.requests, *more.requests]
    outs = [r.output_tokens for r in reqs]
    floor = first.min_output_tokens
    return first.model_copy(update={
        "requests": reqs, "output_tokens": outs,
        "length_ok": all(o >= floor for o in outs) if floor is not None else True,
        "itl_ms": _median([r.itl_ms for r in reqs if r.itl_ms is not None]),
        "chunk_itl_ms": _median([r.chunk_itl_ms for r in reqs if r.chunk_itl_ms is not None]),
        "tokens_per_chunk": _median([r.tokens_per_chunk for r in reqs if r.n_chunks]),
        "ttft_ms": _median([r.ttft_ms for r in reqs if r.n_chunks]),
        "tpot_ms": _median([r.tpot_ms for r in reqs if r.tpot_ms is not None]),
        "finish_reasons": [r.finish_reason for r in reqs],
        "wall_s": first.wall_s + more.wall_s})


def log_notes(log: str) -> list[str]:
    """Server log lines that explain an output-length cap, each once."""
    seen: list[str] = []
    for pat in NOTE_PATTERNS:
        for m in pat.finditer(log):
            line = m.group(0).strip()
            if line not in seen:
                seen.append(line)
    return seen
