"""Replay captured vLLM traffic: the exact bytes of a transcript, at the captured times.

A transcript file (``tests/fixtures/vllm-0.25.1/sse_*.json``) holds records of real
exchanges. For a POST the server picks the record on the same path whose request body
agrees best with the incoming one (stream, max_tokens, min_tokens, stream_options), then
sends the captured raw response split exactly as it was received (``recv_events``), sleeping
until each piece's captured time. GET endpoints answer from the ``endpoints`` section, and
``/metrics`` from a captured metrics file: the "before" block until a generation request has
been answered, the "after" block from then on.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_bisect.sim.http import Request, Responder, start

COMPARED_KEYS = ("stream", "max_tokens", "min_tokens", "stream_options", "ignore_eos")


@dataclass(frozen=True)
class Record:
    name: str
    path: str
    body: dict[str, Any]
    raw: bytes
    events: tuple[tuple[float, int], ...]


def load_records(path: Path) -> tuple[list[Record], dict[str, dict[str, Any]]]:
    data = json.loads(path.read_text())
    records: list[Record] = []
    for name, rec in data.items():
        if name == "endpoints" or "raw_response" not in rec:
            continue
        raw = rec["raw_response"].encode("utf-8")
        events = tuple((float(e["t"]), int(e["nbytes"])) for e in rec["recv_events"])
        records.append(Record(name, rec["request"]["path"], rec["request"]["body"], raw, events))
    return records, data.get("endpoints", {})


def load_metrics_blocks(path: Path, server: str) -> tuple[str, str]:
    """The 'before' and 'after' blocks for one server from a captured metrics file."""
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    for line in path.read_text().splitlines():
        if line.startswith("##########"):
            current = line.strip("# ").strip()
            blocks[current] = []
        elif current is not None:
            blocks[current].append(line)
    before = blocks.get(f"{server}: before requests")
    after = blocks.get(f"{server}: after requests")
    if before is None or after is None:
        raise KeyError(f"no metrics for server {server!r} in {path}; have {sorted(blocks)}")
    return "\n".join(before) + "\n", "\n".join(after) + "\n"


def _score(record: Record, body: dict[str, Any]) -> int:
    mismatches = sum(1 for k in COMPARED_KEYS if record.body.get(k) != body.get(k))
    return mismatches + int(("messages" in record.body) != ("messages" in body))


class ReplayServer:
    def __init__(self, transcript: Path, metrics: tuple[str, str] | None = None,
                 speed: float = 1.0, only: str | None = None) -> None:
        self.records, self.endpoints = load_records(transcript)
        if only is not None:
            self.records = [r for r in self.records if r.name == only]
            if not self.records:
                raise KeyError(f"no record {only!r} in {transcript}")
        self.metrics = metrics
        self.speed = speed
        self.served_generation = False

    def pick(self, path: str, body: dict[str, Any]) -> Record | None:
        candidates = [r for r in self.records if r.path == path]
        return min(candidates, key=lambda r: _score(r, body)) if candidates else None

    async def handle(self, req: Request, resp: Responder) -> None:
        if req.method == "GET" and req.path == "/metrics" and self.metrics:
            text = self.metrics[1] if self.served_generation else self.metrics[0]
            await resp.send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
            return
        if req.method == "GET" and req.path in self.endpoints:
            ep = self.endpoints[req.path]
            status = int(ep["status_line"].split()[1])
            ctype = dict((k.lower(), v) for k, v in ep["headers"]).get("content-type")
            await resp.send(status, ep["body"].encode(), ctype)
            return
        if req.method == "POST":
            try:
                body = req.json()
            except ValueError:
                body = {}
            record = self.pick(req.path, body if isinstance(body, dict) else {})
            if record is not None:
                await self._send_record(record, resp)
                self.served_generation = True
                resp.close_after = True
                return
        await resp.send_json(404, {"detail": "Not Found"})

    async def _send_record(self, record: Record, resp: Responder) -> None:
        t0 = time.monotonic()
        offset = 0
        for t, nbytes in record.events:
            delay = t / self.speed - (time.monotonic() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            await resp.write_raw(record.raw[offset:offset + nbytes])
            offset += nbytes
        if offset < len(record.raw):
            await resp.write_raw(record.raw[offset:])


async def serve(server: ReplayServer, host: str, port: int) -> None:
    srv = await start(server.handle, host, port)
    print(f"replay server on http://{host}:{port}", flush=True)
    async with srv:
        await srv.serve_forever()
