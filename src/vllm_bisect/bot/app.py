"""The webhook service: verify, authorize, rate-limit, queue, acknowledge (Starlette)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from vllm_bisect.bot.commands import find_command, job_spec, triage_comment
from vllm_bisect.bot.config import BotConfig
from vllm_bisect.bot.github import GitHub
from vllm_bisect.bot.queue import JobQueue, QueueFull
from vllm_bisect.errors import SpecError

logger = logging.getLogger(__name__)


def signature_ok(secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header)


def spec_summary(spec: dict[str, Any]) -> str:
    r, v, s = spec.get("range", {}), spec.get("verdict", {}), spec.get("serve", {})
    return (f"good `{r.get('good')}`, bad `{r.get('bad')}`, symptom `{v.get('symptom', 'any')}`"
            f", model `{s.get('model', '?')}`" +
            (f", speculative `{json.dumps(s['speculative'])}`" if s.get("speculative") else ""))


class BotApp:
    def __init__(self, cfg: BotConfig, queue: JobQueue, github: GitHub) -> None:
        self.cfg = cfg
        self.queue = queue
        self.github = github
        self.secret = cfg.secret()
        self.app = Starlette(routes=[Route("/webhook", self.webhook, methods=["POST"]),
                                     Route("/healthz", self.health, methods=["GET"])])

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def webhook(self, request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.cfg.max_body_bytes):
            return JSONResponse({"error": "body too large"}, status_code=413)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.cfg.max_body_bytes:
                return JSONResponse({"error": "body too large"}, status_code=413)
        if not signature_ok(self.secret, body, request.headers.get("x-hub-signature-256")):
            return JSONResponse({"error": "bad signature"}, status_code=401)
        delivery = request.headers.get("x-github-delivery", "")
        if delivery and self.queue.seen_delivery(delivery):
            return JSONResponse({"status": "duplicate delivery"})
        event = request.headers.get("x-github-event", "")
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        if event == "ping":
            return JSONResponse({"status": "pong"})
        if event == "issue_comment" and payload.get("action") == "created":
            args = find_command(str(payload.get("comment", {}).get("body", "")))
            if args is None:
                return JSONResponse({"status": "ignored"})
            return self.request(payload, args or None)
        if (event == "issues" and payload.get("action") == "labeled"
                and payload.get("label", {}).get("name") == self.cfg.label):
            return self.request(payload, None)
        return JSONResponse({"status": "ignored"})

    def request(self, payload: dict[str, Any], args: str | None) -> Response:
        repo = str(payload["repository"]["full_name"])
        issue = payload["issue"]
        number = int(issue["number"])
        actor = payload.get("comment", {}).get("user") or payload.get("sender") or {}
        user = str(actor.get("login", "?"))
        association = str(payload.get("comment", {}).get("author_association")
                          or payload.get("sender_association") or "")
        if association not in self.cfg.trusted_associations and user not in self.cfg.allowlist:
            self.github.comment(repo, number, f"Thanks @{user}! Bisects run on shared GPUs, so "
                                "only maintainers and collaborators can start one. A maintainer "
                                "can comment `/bisect` to run it.")
            return JSONResponse({"status": "unauthorized"}, status_code=202)
        if (self.queue.recent("user", user) >= self.cfg.jobs_per_user_per_hour
                or self.queue.recent("repo", repo) >= self.cfg.jobs_per_repo_per_hour):
            self.github.comment(repo, number, f"@{user}: the bisect rate limit is reached; "
                                "please try again in an hour.")
            return JSONResponse({"status": "rate limited"}, status_code=429)
        try:
            spec = job_spec(self.cfg.base_spec, args, str(issue.get("body") or ""))
        except SpecError as e:
            self.github.comment(repo, number, f"Could not start a bisect: {e.message}"
                                + (f"\n\n{e.hint}" if e.hint else ""))
            return JSONResponse({"status": "invalid request", "error": e.message},
                                status_code=422)
        try:
            job, created = self.queue.enqueue(repo, number, user, spec)
        except QueueFull:
            self.github.comment(repo, number, "The bisect queue is full; please retry later.")
            return JSONResponse({"status": "queue full"}, status_code=503)
        if not created:
            return JSONResponse({"status": "already queued", "job": job.id})
        cid = self.github.comment(repo, number, f"Bisect job #{job.id} queued: "
                                  f"{spec_summary(spec)}. I will edit this comment with progress."
                                  f"\n\n{triage_comment(args, str(issue.get('body') or ''))}")
        self.queue.set_comment(job.id, cid)
        return JSONResponse({"status": "queued", "job": job.id}, status_code=202)
