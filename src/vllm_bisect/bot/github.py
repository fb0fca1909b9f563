"""The GitHub REST calls the bot makes (httpx; base URL configurable; token never logged)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import httpx

from vllm_bisect.report.sanitize import neutralise

logger = logging.getLogger(__name__)


class GitHub:
    def __init__(self, base_url: str, token: str | None, timeout_s: float = 10.0) -> None:
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                   "User-Agent": "vllm-bisect-bot"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                 timeout=timeout_s)

    def _check(self, r: httpx.Response, what: str) -> Any:
        if r.status_code >= 400:
            logger.warning("GitHub %s failed: HTTP %d", what, r.status_code)
            r.raise_for_status()
        return r.json() if r.content else None

    def comment(self, repo: str, issue: int, body: str, mention: Iterable[str] = ()) -> int:
        """Post ``body`` (neutralised: it pings only ``mention`` and loads no image)."""
        r = self.http.post(f"/repos/{repo}/issues/{issue}/comments",
                           json={"body": neutralise(body, mention)})
        return int(self._check(r, "comment")["id"])

    def edit_comment(self, repo: str, comment_id: int, body: str) -> None:
        r = self.http.patch(f"/repos/{repo}/issues/comments/{comment_id}",
                            json={"body": neutralise(body)})
        self._check(r, "edit comment")

    def issue_body(self, repo: str, issue: int) -> str:
        r = self.http.get(f"/repos/{repo}/issues/{issue}")
        return str(self._check(r, "get issue").get("body") or "")

    def permission(self, repo: str, user: str) -> str:
        """The user's role on the repository (admin, maintain, write, triage, read, none),
        from the collaborators API; "none" for a user who is not a collaborator."""
        r = self.http.get(f"/repos/{repo}/collaborators/{user}/permission")
        if r.status_code == 404:
            return "none"
        doc = self._check(r, "collaborator permission")
        if not isinstance(doc, dict):
            return "none"
        return str(doc.get("role_name") or doc.get("permission") or "none")

    def close(self) -> None:
        self.http.close()
