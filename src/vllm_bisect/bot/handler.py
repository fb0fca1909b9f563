"""Handling one validated delivery: authorize, rate-limit, read the issue, then queue, or
ask to confirm a range only read from the issue (`/bisect go`), and reply.

Blocking (GitHub calls, SQLite, triage in a child process): the webhook runs it in a thread
pool, never on its event loop. Raises on a failed GitHub call, so the delivery is not recorded
and GitHub's redelivery of it is handled again.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from vllm_bisect.bot.commands import find_command, job_spec, split_go
from vllm_bisect.bot.config import BotConfig
from vllm_bisect.bot.forms import holds_form, request_text
from vllm_bisect.bot.github import GitHub
from vllm_bisect.bot.payload import Event, IssueCommentEvent, IssuesEvent, PingEvent
from vllm_bisect.bot.policy import JobPlan, describe
from vllm_bisect.bot.queue import JobQueue, QueueFull
from vllm_bisect.errors import SpecError
from vllm_bisect.triage.comment import without_form_reply

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    status: str
    code: int = 200
    job: int | None = None
    error: str | None = None

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.job is not None:
            out["job"] = self.job
        if self.error is not None:
            out["error"] = self.error
        return out


IGNORED = Outcome("ignored")
CONFIRM = ("Comment `/bisect go` to start this bisect, or `/bisect good=<ref> bad=<ref>` to "
           "correct it.")


class Handler:
    def __init__(self, cfg: BotConfig, queue: JobQueue, github: GitHub) -> None:
        self.cfg, self.queue, self.github = cfg, queue, github

    def handle(self, event: Event) -> Outcome:
        if isinstance(event, PingEvent):
            return Outcome("pong")
        if isinstance(event, IssueCommentEvent):
            c = event.comment
            if event.action not in ("created", "edited") or c.user.type == "Bot":
                return IGNORED
            user, repo, number = c.user.login, event.repository.full_name, event.issue.number
            trusted = (c.author_association in self.cfg.trusted_associations
                       or user in self.cfg.allowlist)
            args = find_command(c.body) if event.action == "created" else None
            # a corrected form in a comment of the issue's author or a trusted person (with a
            # /bisect or alone): the issue's latest form, read with this and every later
            # /bisect; anyone else's is ignored
            author = event.issue.user is not None and event.issue.user.login == user
            noted = (author or trusted) and holds_form(c.body)
            if noted:
                self.queue.save_form(repo, number, c.body[:self.cfg.triage_max_chars],
                                     event.issue.body or "")
            if args is None:
                return Outcome("form noted") if noted else IGNORED
            body = request_text(event.issue.body or "", *self.queue.latest_form(repo, number),
                                max_chars=self.cfg.triage_max_chars)
            return self.request(repo, number, user, trusted, args or None, body)
        if (isinstance(event, IssuesEvent) and event.action == "labeled"
                and event.label is not None and event.label.name == self.cfg.label):
            user, repo = event.sender.login, event.repository.full_name
            # the payload says who labeled, not their role: ask the collaborators API
            trusted = (user in self.cfg.allowlist or self.github.permission(repo, user)
                       in self.cfg.trusted_permissions)
            return self.request(repo, event.issue.number, user, trusted, None, request_text(
                event.issue.body or "", *self.queue.latest_form(repo, event.issue.number),
                max_chars=self.cfg.triage_max_chars))
        return IGNORED

    def _reply_once(self, key: str, window_s: float | None, repo: str, issue: int,
                    text: str, user: str) -> None:
        if not self.queue.reply_once(key, window_s):
            return
        try:
            self.github.comment(repo, issue, text, mention=(user,))
        except BaseException:
            self.queue.forget_reply(key)  # not said: a redelivery may say it
            raise

    def request(self, repo: str, number: int, user: str, trusted: bool, args: str | None,
                issue_body: str) -> Outcome:
        if not trusted:   # one polite refusal per issue, however many outsiders ask
            self._reply_once(f"outsider:{repo}#{number}", None, repo, number,
                             f"Thanks @{user}! Bisects run on shared GPUs, so only maintainers "
                             "and collaborators can start one. A maintainer can comment "
                             "`/bisect` to see what I read here, then `/bisect go` to run it. "
                             "(I reply to this only once per issue.)", user)
            return Outcome("unauthorized", 202)
        if (self.queue.recent("user", user) >= self.cfg.jobs_per_user_per_hour
                or self.queue.recent("repo", repo) >= self.cfg.jobs_per_repo_per_hour):
            self._reply_once(f"rate:{repo}#{number}:{user}", self.cfg.rate_reply_window_s,
                             repo, number, f"@{user}: the bisect rate limit is reached; "
                             "please try again in an hour.", user)
            return Outcome("rate limited", 429)
        go, rest = split_go(args)
        try:
            plan = job_spec(self.cfg, rest or None, issue_body)
        except SpecError as e:   # said once per issue and reading, not once per request
            text = f"Could not start a bisect: {e.message}" + (f"\n\n{e.hint}" if e.hint else "")
            digest = hashlib.sha256(text.encode()).hexdigest()[:32]
            self._reply_once(f"invalid:{repo}#{number}:{digest}", self.cfg.replay_window_s,
                             repo, number, text, user)
            return Outcome("invalid request", 422, error=e.message)
        if plan.triaged and not go and self.cfg.confirm_triaged_range:
            return self._ask(repo, number, user, plan)
        try:
            job, created = self.queue.enqueue(repo, number, user, plan.spec)
        except QueueFull:
            self.github.comment(repo, number, "The bisect queue is full; please retry later.")
            return Outcome("queue full", 503)
        if not created and job.comment_id is not None:
            return Outcome("already queued", job=job.id)
        cid = self.github.comment(repo, number, f"Bisect job #{job.id} queued; I will edit "
                                  f"this comment with progress.\n\n{describe(plan)}"
                                  + (f"\n\n{without_form_reply(plan.read)}" if plan.read else ""))
        self.queue.set_comment(job.id, cid)
        return Outcome("queued", 202, job=job.id)

    def _ask(self, repo: str, number: int, user: str, plan: JobPlan) -> Outcome:
        """A range read from the issue (not typed in the command) runs only once confirmed:
        show what was read, once per reading (an edited issue that reads differently is
        shown again; a redelivery or a relabel of the same reading is not)."""
        refs = " and ".join(plan.triaged)
        were = "refs were" if len(plan.triaged) > 1 else "ref was"
        text = (f"The {refs} {were} read from the issue text, not given in the command, "
                "so nothing is queued yet: a wrong range spends GPU hours in the wrong "
                f"place. Please check it.\n\n{describe(plan)}"
                + (f"\n\n{plan.read.rstrip()}" if plan.read else "") + f"\n\n{CONFIRM}")
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]   # the reading, not who asked
        self._reply_once(f"confirm:{repo}#{number}:{digest}", self.cfg.replay_window_s, repo,
                         number, f"@{user}: {text}", user)
        return Outcome("awaiting confirmation", 202)
