"""A closed-loop load generator: server output tok/s and per-request TPOT at a concurrency.

``concurrency`` clients each send the next request as soon as their last one finished, until
``requests`` have completed; output tokens are the server's own counts (usage), so no client
quirk changes the metric. Output throughput = all output tokens / wall time from the first
request sent to the last one finished (the number ``vllm bench serve`` calls
``output_throughput``). Requests reuse the decode probe's streaming and SSE checks.

One ``LoadProbe`` measures one (concurrency, context) cell; ``measure_grid`` runs every cell
of a LoadSpec whose ``concurrency``/``context`` are lists. A cell with a ``context`` sends a
prompt of about that many tokens (cut with the server's /tokenize, see probes.prompt) and
checks the server's ``usage.prompt_tokens``; each cell's acceptance comes from the /metrics
deltas over that cell alone.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from vllm_bisect import net
from vllm_bisect.errors import ProbeError
from vllm_bisect.models import LoadResult, RequestResult
from vllm_bisect.probes import metrics
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.probes.prompt import check_prompt_tokens
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import LoadSpec, OpsSpec, ProbeSpec

logger = logging.getLogger(__name__)


class LoadProbe:
    def __init__(self, probe: ProbeSpec, load: LoadSpec, *, ops: OpsSpec | None = None) -> None:
        if len(load.concurrencies) > 1 or len(load.contexts) > 1:
            raise ValueError("LoadProbe measures one cell: use measure_grid for lists")
        self.load = load
        self.concurrency = load.single_concurrency
        self.context = load.single_context
        self.decode = DecodeProbe(probe.model_copy(update={
            "max_tokens": load.max_tokens, "send_max_tokens": True, "ignore_eos": True,
            "concurrency": self.concurrency, "prompt_tokens": self.context}), None,
            ops=ops)

    def measure(self, server: ServerHandle) -> LoadResult:
        c, n = self.concurrency, max(self.load.requests, self.concurrency)
        limits = httpx.Limits(max_connections=c + 2)
        timeout = httpx.Timeout(30.0, read=self.decode.ops.request_timeout_s)
        with net.client(limits=limits, timeout=timeout) as http:
            sized = self.decode.sized_prompt(http, server, self.context)
        body = self.decode.request_body(server.model, self.load.max_tokens,
                                        sized.text if sized is not None else None)
        results: list[RequestResult] = []
        errors: list[str] = []
        lock = threading.Lock()
        issued = 0

        def client(http: httpx.Client) -> None:
            nonlocal issued
            while True:
                with lock:
                    if issued >= n:
                        return
                    issued += 1
                try:
                    r = self.decode.run_one(http, server, body)
                except ProbeError as err:
                    with lock:
                        errors.append(err.message)
                    continue
                with lock:
                    results.append(r)

        with net.client(limits=limits, timeout=timeout) as http:
            # warm-up at the cell's concurrency: Triton kernels compile per batch shape (on real
            # vLLM with MTP the first c=12 cell, warmed by one request only, ran at 3x the TPOT
            # of the next c=12 cell; most likely that compilation)
            warm = {k: v for k, v in body.items() if k != "min_tokens"} | {"max_tokens": 16}
            with ThreadPoolExecutor(max_workers=c) as pool:
                warming = [pool.submit(self.decode.run_one, http, server, warm) for _ in range(c)]
                for w in warming:
                    w.result()
            before = metrics.scrape(http, server.url)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=c) as pool:
                for f in [pool.submit(client, http) for _ in range(c)]:
                    f.result()
            wall = time.perf_counter() - t0
            after = metrics.scrape(http, server.url)
        if not results:
            raise ProbeError(f"load probe: every request failed ({errors[0] if errors else '?'})",
                             hint="see the server log")
        if sized is not None:
            check_prompt_tokens(sized, [r.prompt_tokens for r in results])
        delta = metrics.diff(before, after) if before is not None and after is not None else None
        for why in delta.unavailable if delta else ():
            logger.warning("load at concurrency %d: %s", c, why)
        tokens = sum(r.output_tokens for r in results)
        tpots = [r.tpot_ms for r in results if r.tpot_ms is not None]
        counted = [r.prompt_tokens for r in results if r.prompt_tokens is not None]
        return LoadResult(concurrency=c, requests=len(results), errors=len(errors),
                          duration_s=wall, output_tokens=tokens, output_tok_s=tokens / wall,
                          tpot_ms=statistics.median(tpots) if tpots else None,
                          per_request_tok_s=[1000.0 / t for t in tpots if t > 0],
                          context_tokens=self.context,
                          prompt_tokens=statistics.median_low(counted) if counted else None,
                          acceptance_length=delta.acceptance_length if delta else None,
                          acceptance_per_position=delta.acceptance_per_position if delta else None)


def measure_grid(probe: ProbeSpec, load: LoadSpec, server: ServerHandle, *,
                 ops: OpsSpec | None = None,
                 say: Callable[[str], None] | None = None) -> list[LoadResult]:
    """Every (concurrency, context) cell of ``load`` on one server, concurrency-major.
    ``say``: a line before each cell of a grid ('cell n of m'), as each may run minutes."""
    cells = load.cells()
    out = []
    for n, cell in enumerate(cells, 1):
        if say is not None and len(cells) > 1:
            ctx = f", context {cell.context}" if cell.context is not None else ""
            say(f"cell {n} of {len(cells)}: concurrency {cell.concurrency}{ctx}")
        out.append(LoadProbe(probe, cell, ops=ops).measure(server))
    return out
