"""The bot's worker: runs queued jobs with the normal driver and reports on the issue."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.bisect.state.session import default_cache_dir
from vllm_bisect.bot.config import BotConfig
from vllm_bisect.bot.github import GitHub
from vllm_bisect.bot.queue import Job, JobQueue
from vllm_bisect.errors import BisectError, NotReproduced
from vllm_bisect.models import Outcome
from vllm_bisect.report.render import load, markdown
from vllm_bisect.run_bisect import run_bisect
from vllm_bisect.runtime.childenv import is_secret_name
from vllm_bisect.spec import parse_spec
from vllm_bisect.text import plural, short_subject

logger = logging.getLogger(__name__)


class CommentProgress:
    """Event handler that edits one issue comment in place (at most every interval_s).

    ``comment_id`` tells the comment's id when asked (None: not known yet): the webhook
    stores the id of its "queued" comment only after the job is in the queue, so the worker
    may have claimed the job before."""

    def __init__(self, github: GitHub, job: Job, interval_s: float,
                 comment_id: Callable[[], int | None] | None = None) -> None:
        self.github, self.job, self.interval_s = github, job, interval_s
        self.comment_id = comment_id or (lambda: job.comment_id)
        self.lines: list[str] = []
        self.last = 0.0
        self.total = 0

    def _flush(self, force: bool = False) -> None:
        cid = self.comment_id()
        if cid is None or (not force and time.monotonic() - self.last < self.interval_s):
            return
        self.last = time.monotonic()
        body = (f"Bisect job #{self.job.id} running over {plural(self.total, 'commit')}:\n\n"
                + "\n".join(f"- {ln}" for ln in self.lines[-30:]))
        try:  # progress is best effort: a GitHub hiccup must not abort the bisect
            self.github.edit_comment(self.job.repo, cid, body)
        except httpx.HTTPError as err:
            logger.warning("progress edit of job %d failed: %s", self.job.id, err)

    def on_range(self, rng: CommitRange) -> None:
        self.total = len(rng.commits)
        self._flush(force=True)

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        pass

    def on_phase(self, commit: str, phase: str) -> None:
        pass

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        self.lines.append(f"`{commit.sha[:12]}` {short_subject(commit.subject, 60)}: "
                          f"**{outcome.verdict.value}**"
                          f" ({outcome.reason})")
        self._flush()


def redact(text: str, spec: dict[str, Any]) -> str:
    """The report quotes the spec: hide the values of credential-like env names in it."""
    for key, value in ((spec.get("serve") or {}).get("env") or {}).items():
        if is_secret_name(str(key)) and str(value):
            text = text.replace(str(value), "<redacted>")
    return text


class Worker(threading.Thread):
    def __init__(self, cfg: BotConfig, queue: JobQueue, github: GitHub) -> None:
        super().__init__(daemon=True, name="vllm-bisect-worker")
        self.cfg, self.queue, self.github = cfg, queue, github
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            job = self.queue.claim()
            if job is None:
                self.stopping.wait(0.5)
                continue
            try:
                self.process(job)
            except Exception:  # a job must never take the worker down
                logger.exception("job %d crashed", job.id)
                self.queue.finish(job.id, False, {"error": "internal error"})

    def process(self, job: Job) -> None:
        session = Path(self.cfg.state_dir) / "sessions" / f"job-{job.id}"
        cache = self.cfg.cache_dir or default_cache_dir()
        # the comment's id as stored now: the job may have been claimed before the webhook
        # stored it (its "queued" comment still being posted); the result then went into a
        # second comment and the "queued" one was never edited (seen under CI load)
        def comment_id() -> int | None:
            return self.queue.get(job.id).comment_id

        events = CommentProgress(self.github, job, self.cfg.progress_interval_s, comment_id)
        ok = True
        try:
            run_bisect(parse_spec(job.spec, source=f"job {job.id}"), session, cache, events)
            report = load(session)  # the one result model, as result.json holds it
            head = (f"Bisect job #{job.id} finished." if report.result.first_bad else
                    f"Bisect job #{job.id} is inconclusive: untestable commits separate good "
                    "from bad, so no commit is blamed.")
            body = f"{head}\n\n{markdown(report)}"
            outcome = {"first_bad": report.result.first_bad,
                       "candidates": report.result.candidates}
        except NotReproduced as e:
            body = (f"Bisect job #{job.id} is inconclusive: {e.message}. No commit is blamed."
                    + (f"\n\n{e.hint}" if e.hint else ""))
            outcome = {"inconclusive": e.message}
        except BisectError as e:
            ok = False
            body = f"Bisect job #{job.id} failed: {e.message}" + (f"\n\n{e.hint}" if e.hint else "")
            outcome = {"error": e.message}
        body = redact(body, job.spec)
        if (cid := comment_id()) is not None:
            self.github.edit_comment(job.repo, cid, body)
        else:
            self.github.comment(job.repo, job.issue, body)
        self.queue.finish(job.id, ok, outcome)
