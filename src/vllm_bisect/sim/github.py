"""A local stand-in for the GitHub REST API (issues, comments, collaborator permissions),
recorded for inspection: what `vllm-bisect bot try` runs the bot against, and the bot tests'
GitHub. A real HTTP server on 127.0.0.1. It can be made slow (``delay_s``), made to hang
until released (``hold()`` / ``release()``) or to fail (``fail_status``)."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Comment:
    id: int
    repo: str
    issue: int
    body: str
    edits: list[str] = field(default_factory=list)
    posted: str = ""   # the body as first posted (``body`` is the latest edit's)

    def __post_init__(self) -> None:
        self.posted = self.posted or self.body


class GitHubStandIn:
    def __init__(self, issues: dict[tuple[str, int], str] | None = None) -> None:
        self.issues = issues or {}
        self.comments: list[Comment] = []
        self.auth: list[str | None] = []
        self.requests: list[str] = []
        self.permissions: dict[str, str] = {}     # login -> role_name; others: 404
        self.delay_s = 0.0
        self.fail_status: int | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = 0                          # requests held at the gate right now
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _reply(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")  # type: ignore[no-any-return]

            def _stall(self) -> bool:
                """Record, delay, hold at the gate; True if this request must fail."""
                with outer.lock:
                    outer.requests.append(f"{self.command} {self.path}")
                time.sleep(outer.delay_s)
                if not outer.gate.is_set():
                    with outer.lock:
                        outer.waiting += 1
                    outer.gate.wait(120)
                    with outer.lock:
                        outer.waiting -= 1
                if outer.fail_status is not None:
                    self._reply(outer.fail_status, {"message": "Server Error"})
                    return True
                return False

            def do_GET(self) -> None:
                if self._stall():
                    return
                m = re.fullmatch(r"/repos/([^/]+/[^/]+)/collaborators/([^/]+)/permission",
                                 self.path)
                if m:
                    role = outer.permissions.get(m.group(2))
                    if role is None:
                        return self._reply(404, {"message": "Not Found"})
                    legacy = {"maintain": "write", "triage": "read"}.get(role, role)
                    return self._reply(200, {"permission": legacy, "role_name": role})
                m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)", self.path)
                if m and (m.group(1), int(m.group(2))) in outer.issues:
                    self._reply(200, {"number": int(m.group(2)),
                                      "body": outer.issues[(m.group(1), int(m.group(2)))]})
                else:
                    self._reply(404, {"message": "Not Found"})

            def do_POST(self) -> None:
                outer.auth.append(self.headers.get("Authorization"))
                body = self._body()
                if self._stall():
                    return
                m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", self.path)
                if not m:
                    return self._reply(404, {"message": "Not Found"})
                with outer.lock:
                    c = Comment(len(outer.comments) + 1, m.group(1), int(m.group(2)),
                                body["body"])
                    outer.comments.append(c)
                self._reply(201, {"id": c.id, "body": c.body})

            def do_PATCH(self) -> None:
                body = self._body()
                if self._stall():
                    return
                m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", self.path)
                if not m:
                    return self._reply(404, {"message": "Not Found"})
                with outer.lock:
                    c = outer.comments[int(m.group(2)) - 1]
                    c.body = body["body"]
                    c.edits.append(c.body)
                self._reply(200, {"id": c.id, "body": c.body})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self) -> None:
        """From now on every request hangs until release() (a stalled GitHub)."""
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
