"""A local stand-in for the GitHub REST API: issues and comments, recorded for assertions."""

from __future__ import annotations

import json
import re
import threading
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


class GitHubStandIn:
    def __init__(self, issues: dict[tuple[str, int], str] | None = None) -> None:
        self.issues = issues or {}
        self.comments: list[Comment] = []
        self.auth: list[str | None] = []
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

            def do_GET(self) -> None:
                m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)", self.path)
                if m and (m.group(1), int(m.group(2))) in outer.issues:
                    self._reply(200, {"number": int(m.group(2)),
                                      "body": outer.issues[(m.group(1), int(m.group(2)))]})
                else:
                    self._reply(404, {"message": "Not Found"})

            def do_POST(self) -> None:
                outer.auth.append(self.headers.get("Authorization"))
                m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(\d+)/comments", self.path)
                if not m:
                    return self._reply(404, {"message": "Not Found"})
                with outer.lock:
                    c = Comment(len(outer.comments) + 1, m.group(1), int(m.group(2)),
                                self._body()["body"])
                    outer.comments.append(c)
                self._reply(201, {"id": c.id, "body": c.body})

            def do_PATCH(self) -> None:
                m = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", self.path)
                if not m:
                    return self._reply(404, {"message": "Not Found"})
                with outer.lock:
                    c = outer.comments[int(m.group(2)) - 1]
                    c.body = self._body()["body"]
                    c.edits.append(c.body)
                self._reply(200, {"id": c.id, "body": c.body})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
