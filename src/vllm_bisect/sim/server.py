"""A vLLM-compatible OpenAI server driven by :class:`SimConfig`.

Endpoints and framing follow vLLM 0.25.1 (see ``tests/fixtures/vllm-0.25.1``): ``/health``,
``/v1/models``, ``/version``, ``/metrics``, ``/v1/completions`` and ``/v1/chat/completions``
(streamed and not). Like vLLM, the port is bound only once the "engine" is up, so clients see
connection refused during start-up.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import random
import signal
import sys
import time
from datetime import datetime
from typing import Any

from vllm_bisect.sim import protocol as p
from vllm_bisect.sim.engine import (
    RequestError,
    SimConfig,
    count_prompt_tokens,
    plan_request,
    plan_steps,
    token_text,
)
from vllm_bisect.sim.http import Request, Responder, start
from vllm_bisect.sim.metrics import EngineMetrics
from vllm_bisect.sim.paired import paired_draw
from vllm_bisect.sim.profiler import SimProfiler

logger = logging.getLogger(__name__)


def vlog(level: str, where: str, msg: str) -> None:
    """A log line in vLLM's format, on stdout (where vLLM writes its logs)."""
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    sys.stdout.write(f"(APIServer pid={os.getpid()}) {level} {stamp} [{where}] {msg}\n")
    sys.stdout.flush()


class SimServer:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.created = int(time.time())
        self.metrics = EngineMetrics(cfg.model, cfg.spec_k)
        # unseeded: VLLM_SIM_PAIRED (a benchmark's paired noise, sim/paired.py) or the OS
        self.paired = paired_draw(f"{cfg.version}|{cfg.step_ms}") if cfg.seed is None else None
        self.rng = random.Random(self.paired.seed if self.paired is not None else cfg.seed)
        self.level = max(0.2, self.rng.gauss(1.0, cfg.server_cv)) if cfg.server_cv > 0 else 1.0
        self.tokens_emitted = 0
        self.requests_seen = 0
        self.started = time.monotonic()
        self.dead = False
        # cold-server stalls (SimConfig.cold_stalls): requests past their first token, the
        # stalls not yet spent, and the monotonic time until which the whole server is paused
        self.decoding = 0
        self.cold_stalls_left = cfg.cold_stalls if cfg.cold_stall_s > 0 else 0
        self.paused_until = 0.0
        self.profiler = SimProfiler(cfg, self.level, str(os.getpid())) if cfg.profiler_dir else None

    # -- routing -----------------------------------------------------------------------
    async def handle(self, req: Request, resp: Responder) -> None:
        route = (req.method, req.path)
        if self.dead and req.path != "/health":
            await resp.send_json(500, p.error_response("EngineCore died", 500, "InternalServerError"))
            return
        if route == ("GET", "/health"):
            await resp.send(503 if self.dead else 200, b"")
        elif route == ("GET", "/v1/models"):
            await resp.send_json(200, p.models_response(self.cfg.model, self.created,
                                                        self.cfg.max_model_len, self.cfg.root))
        elif route == ("GET", "/version"):
            await resp.send_json(200, {"version": self.cfg.version})
        elif route == ("GET", "/metrics"):
            await resp.send(200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        elif route == ("POST", "/v1/completions"):
            await self.generate(req, resp, chat=False)
        elif route == ("POST", "/v1/chat/completions"):
            await self.generate(req, resp, chat=True)
        elif route == ("POST", "/tokenize"):
            await self.tokenize(req, resp)
        elif self.profiler is not None and route in {("POST", "/start_profile"),
                                                     ("POST", "/stop_profile")}:
            await self.profiler.handle(req.path, resp)
        elif req.path in {"/health", "/v1/models", "/version", "/metrics", "/v1/completions",
                          "/v1/chat/completions", "/tokenize"}:
            await resp.send_json(405, {"detail": "Method Not Allowed"})
        else:
            await resp.send_json(404, {"detail": "Not Found"})

    # -- generation --------------------------------------------------------------------
    def _prompt(self, body: dict[str, Any], chat: bool) -> str:
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                raise RequestError("messages must be a non-empty list")
            return " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = " ".join(str(x) for x in prompt)
        if not isinstance(prompt, str):
            raise RequestError("prompt must be a string")
        return prompt

    def _acceptance_rng(self, body: dict[str, Any], chat: bool) -> random.Random:
        """The generator of a request's draft acceptances (see SimConfig.prompt_seeded_acceptance)."""
        greedy = not body.get("temperature")
        if not (self.cfg.prompt_seeded_acceptance and greedy):
            return self.rng
        key = f"{self.cfg.seed}|{self._prompt(body, chat)}".encode()
        return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))

    async def _body_for_model(self, req: Request, resp: Responder) -> dict[str, Any] | None:
        """The request's JSON object, or None once a 404 is sent for another model's name
        (a body that is not an object raises RequestError, answered 400 by the caller)."""
        body = req.json()
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        if body.get("model") not in (None, self.cfg.model) and not self.cfg.answer_any_model:
            await resp.send_json(404, p.error_response(
                f"The model `{body.get('model')}` does not exist.", 404, "NotFoundError"))
            return None
        return body

    async def tokenize(self, req: Request, resp: Responder) -> None:
        """``POST /tokenize`` as vLLM 0.25.1 answers it (serve/tokenize/protocol.py):
        ``{"prompt"}`` or ``{"messages"}`` in, ``{"count", "max_model_len", "tokens",
        "token_strs"}`` out, counted the way generation counts prompt tokens."""
        try:
            body = await self._body_for_model(req, resp)
            if body is None:
                return
            chat = "messages" in body
            if not chat and "prompt" not in body:
                raise RequestError("Field required: prompt (or messages)")
            n = count_prompt_tokens(self._prompt(body, chat))
        except (ValueError, RequestError) as err:
            await resp.send_json(400, p.error_response(str(err)))
            return
        ids = [(i * 7919) % 2048 for i in range(n)]
        strs = [str(x) for x in ids] if body.get("return_token_strs") else None
        await resp.send_json(200, {"count": n, "max_model_len": self.cfg.max_model_len,
                                   "tokens": ids, "token_strs": strs})

    async def generate(self, req: Request, resp: Responder, chat: bool) -> None:
        try:
            body = await self._body_for_model(req, resp)
            if body is None:
                return
            prompt_tokens = count_prompt_tokens(self._prompt(body, chat))
            plan = plan_request(self.cfg, body, chat, prompt_tokens, self.rng)
        except (ValueError, RequestError) as err:
            await resp.send_json(400, p.error_response(str(err)))
            return
        self.requests_seen += 1
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage"))
        continuous = include_usage and bool(opts.get("continuous_usage_stats"))
        rid = p.request_id(chat)
        created = int(time.time())
        model = self.cfg.model
        steps = plan_steps(self.cfg, plan.n_tokens, self._acceptance_rng(body, chat))
        pace = self.cfg.step_ms / 1000.0 * self.level
        if self.cfg.noise_cv > 0:
            pace *= max(0.1, self.rng.gauss(1.0, self.cfg.noise_cv))
        t0 = time.monotonic()
        self._cold_stall(t0)
        await asyncio.sleep(prefill_s(self.cfg, prompt_tokens) * self.level
                            * (max(0.1, self.rng.gauss(1.0, self.cfg.noise_cv))
                               if self.cfg.noise_cv > 0 else 1.0))
        if self.requests_seen == 1 and self.cfg.first_request_delay_s:
            await asyncio.sleep(self.cfg.first_request_delay_s)  # Triton JIT on first request
        stream = bool(body.get("stream"))
        running = self.metrics.running.labels(**self.metrics.lv)
        running.inc()
        decoding = False
        try:
            if stream:
                await resp.start_stream()
                if chat:
                    u = p.usage(prompt_tokens, 0) if continuous else None
                    await resp.write_chunk(p.sse(p.chat_role_chunk(rid, created, model, u)))
            text_parts: list[str] = []
            held = ""  # text of steps whose chunk is held back (merge_lagging_outputs)
            done = 0
            ttft = 0.0
            last = t0
            next_at = time.monotonic()
            for i, step in enumerate(steps):
                if i > 0:
                    next_at += pace * self._drift(next_at)
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                if await self._wait_stall():
                    next_at = time.monotonic()  # the engine resumes; later steps keep pace
                if self.cfg.crash_after_tokens is not None and \
                        self.tokens_emitted + step.tokens > self.cfg.crash_after_tokens:
                    await self._crash()
                    return
                text = "".join(token_text(done + j, self.cfg.diverge_after_tokens)
                               for j in range(step.tokens))
                done += step.tokens
                self.tokens_emitted += step.tokens
                if self.profiler is not None:
                    self.profiler.record(i == 0, prompt_tokens if i == 0 else 1 + self.cfg.spec_k)
                now = time.monotonic()
                if i == 0:
                    ttft = now - t0
                    next_at = now
                    decoding = True
                    self.decoding += 1
                self.metrics.on_step(step.tokens, step.drafted, step.accepted,
                                     None if i == 0 else now - last)
                last = now
                finish = plan.finish_reason if i == len(steps) - 1 else None
                if stream:
                    held += text
                    if (self.cfg.merge_lagging_outputs and finish is None
                            and time.monotonic() >= next_at + pace):
                        continue  # the next step is already due: send both as one chunk
                    u = p.usage(prompt_tokens, done) if continuous else None
                    chunk = (p.chat_chunk if chat else p.completion_chunk)(
                        rid, created, model, held, finish, u)
                    held = ""
                    await resp.write_chunk(p.sse(chunk))
                else:
                    text_parts.append(text)
            total = p.usage(prompt_tokens, done)
            self.metrics.on_finish(plan.finish_reason, prompt_tokens, done, ttft,
                                   time.monotonic() - t0)
            if stream:
                if include_usage:
                    await resp.write_chunk(p.sse(p.final_usage_chunk(
                        rid, created, model, chat, total, self.cfg.fingerprint)))
                await resp.write_chunk(p.SSE_DONE)
                await resp.end_stream()
            else:
                build = p.chat_response if chat else p.completion_response
                await resp.send_json(200, build(rid, created, model, "".join(text_parts),
                                                plan.finish_reason, total, self.cfg.fingerprint))
        finally:
            running.dec()
            if decoding:
                self.decoding -= 1

    def _cold_stall(self, now: float) -> None:
        """A prefill starting while another request decodes, on a cold server: the first
        ``cold_stalls`` times, the whole server pauses ``cold_stall_s`` (a first-use compile of
        the new batch shape, docs/validation.md (g))."""
        if self.cold_stalls_left <= 0 or self.decoding == 0:
            return
        self.cold_stalls_left -= 1
        self.paused_until = max(self.paused_until, now) + self.cfg.cold_stall_s
        vlog("INFO", "backends.py:215", f"Compiling a graph for a new batch shape takes "
             f"{self.cfg.cold_stall_s:.2f} s (simulated first-use stall, VLLM_SIM_COLD_STALLS; "
             f"{self.cold_stalls_left} left)")

    async def _wait_stall(self) -> bool:
        """Wait while the server is paused by a cold stall; True when it was."""
        waited = False
        while (left := self.paused_until - time.monotonic()) > 0:
            waited = True
            await asyncio.sleep(left)
        return waited

    def _drift(self, t: float) -> float:
        """The server's speed factor at monotonic time ``t`` (1.0 without a drift)."""
        if not self.cfg.drift_amplitude:
            return 1.0
        phase = 2.0 * math.pi * (t - self.started) / self.cfg.drift_period_s
        return max(0.05, 1.0 + self.cfg.drift_amplitude * math.sin(phase))

    async def _crash(self) -> None:
        """Die like an engine hitting 'CUDA error: an illegal memory access'."""
        self.dead = True
        vlog("ERROR", "core.py:1000", "EngineCore encountered a fatal error.")
        sys.stderr.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")
        sys.stderr.flush()
        os._exit(1)


TOKENS_PER_GIB = 16384  # the simulated model's KV cache: 64 KiB per token


def prefill_s(cfg: SimConfig, prompt_tokens: int) -> float:
    """The prefill step: prefill_ms for a prompt of up to 512 tokens, proportionally longer."""
    return cfg.prefill_ms / 1000.0 * max(1.0, prompt_tokens / 512.0)


def log_memory(cfg: SimConfig) -> bool:
    """vLLM 0.25.1's start-up memory lines (tests/fixtures/vllm-0.25.1/server_logs_last200.txt);
    False (after its error) when the KV cache does not fit one request of max_model_len."""
    engine = f"(EngineCore pid={os.getpid()})"
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")

    def line(level: str, where: str, msg: str) -> None:
        sys.stdout.write(f"{engine} {level} {stamp} [{where}] {msg}\n")

    line("INFO", "gpu_model_runner.py:5306", f"Model loading took {cfg.weights_gib:.2f} GiB memory "
         "and 0.229726 seconds")
    needed = cfg.max_model_len / TOKENS_PER_GIB
    if cfg.kv_cache_gib < needed:
        line("ERROR", "core.py:1000", "EngineCore failed to start.")
        sys.stdout.write(
            f"ValueError: To serve at least one request with the models's max seq len "
            f"({cfg.max_model_len}), ({needed:.2f} GiB KV cache is needed, which is larger than "
            f"the available KV cache memory ({max(0.0, cfg.kv_cache_gib):.2f} GiB). Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
            "\n")
        sys.stdout.flush()
        return False
    tokens = int(cfg.kv_cache_gib * TOKENS_PER_GIB)
    line("INFO", "gpu_worker.py:538", f"Available KV cache memory: {cfg.kv_cache_gib:.2f} GiB")
    line("INFO", "kv_cache_utils.py:2146", f"GPU KV cache size: {tokens:,} tokens")
    line("INFO", "kv_cache_utils.py:2147", f"Maximum concurrency for {cfg.max_model_len:,} tokens "
         f"per request: {tokens / cfg.max_model_len:.2f}x")
    sys.stdout.flush()
    return True


async def serve(cfg: SimConfig, host: str, port: int) -> None:
    vlog("INFO", "api_utils.py:273", f"non-default args: {{'model': {cfg.model!r}, 'port': {port}}}")
    if cfg.spec_k:
        vlog("INFO", "core.py:114", f"Initializing a V1 LLM engine (v{cfg.version}) with config: "
             f"model={cfg.model!r}, speculative_config=SpeculativeConfig(num_spec_tokens={cfg.spec_k})")
    else:
        vlog("INFO", "core.py:114", f"Initializing a V1 LLM engine (v{cfg.version}) with config: "
             f"model={cfg.model!r}, speculative_config=None")
    if cfg.profiler_dir:
        vlog("INFO", "wrapper.py:160", "Torch profiling enabled. Traces will be saved to: "
             f"{cfg.profiler_dir}")
    await asyncio.sleep(cfg.startup_delay_s)
    if not log_memory(cfg):
        sys.exit(1)
    overrides = cfg.default_overrides()
    if overrides:
        vlog("WARNING", "model.py:1528", "Default vLLM sampling parameters have been overridden by "
             f"the model's `generation_config.json`: `{overrides}`. If this is not intended, "
             "please relaunch vLLM instance with `--generation-config vllm`.")
    sim = SimServer(cfg)
    server = await start(sim.handle, host, port)
    vlog("INFO", "api_server.py:616", f"Starting vLLM server on http://{host}:{port}")
    sys.stdout.write(f"(APIServer pid={os.getpid()}) INFO:     Application startup complete.\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    sys.stdout.write(f"(APIServer pid={os.getpid()}) INFO:     Shutting down\n")
    sys.stdout.flush()
    await asyncio.sleep(cfg.shutdown_delay_s)
    if sim.paired is not None:
        sim.paired.ended()


def run(cfg: SimConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    asyncio.run(serve(cfg, host, port))
