"""Servers measured but not yet recorded: kept in the journal while the server is torn down.

A server's evaluation reaches the journal's outcomes only after its server is stopped (the
launcher's teardown: SIGTERM, then the wait for the process group, up to ``GRACE_S``; real
vLLM takes seconds to shut down) and the evaluation went back through the executor to the
tester. A run killed in that window lost a finished measurement, and the resumed run started
that commit's server again. The evaluator now keeps a finished evaluation here before the
teardown (:func:`keep`); the measurer drops it when the evaluation comes back (:func:`drop`),
and a resumed call asked for the same commit takes it instead of starting a server
(:func:`take`).
"""

from __future__ import annotations

import logging
import time

from pydantic import ValidationError

from vllm_bisect.bisect.policies.base import MoreSamples
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.models import Evaluation

logger = logging.getLogger(__name__)

_TABLE = ("CREATE TABLE IF NOT EXISTS unrecorded (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
          "commit_sha TEXT NOT NULL, key TEXT NOT NULL, evaluation TEXT NOT NULL, "
          "created REAL NOT NULL)")


def keep(journal: SessionJournal, key: str, ev: Evaluation) -> None:
    """A finished evaluation of ``key``, kept until it is recorded (its server still up)."""
    with journal.locked():
        journal.con.execute(_TABLE)
        journal.con.execute("INSERT INTO unrecorded (commit_sha, key, evaluation, created) "
                            "VALUES (?, ?, ?, ?)", (ev.commit, key, ev.model_dump_json(),
                                                    time.time()))


def drop(journal: SessionJournal, ev: Evaluation) -> None:
    """The evaluation came back to be recorded: no longer kept (its own row; else, one that
    ended otherwise after it was kept, the oldest of its commit). By commit, not key: a row is
    never left behind by a key computed from another spec."""
    with journal.locked():
        journal.con.execute(_TABLE)
        gone = journal.con.execute(
            "DELETE FROM unrecorded WHERE seq = (SELECT MIN(seq) FROM unrecorded WHERE "
            "commit_sha = ? AND evaluation = ?)", (ev.commit, ev.model_dump_json())).rowcount
        if not gone:
            journal.con.execute("DELETE FROM unrecorded WHERE seq = (SELECT MIN(seq) FROM "
                                "unrecorded WHERE commit_sha = ?)", (ev.commit,))


def take(journal: SessionJournal, key: str, more: MoreSamples | None) -> Evaluation | None:
    """An evaluation of ``key`` an earlier call kept and never recorded (the oldest that has
    the samples ``more`` asks for), removed from the kept ones; None: none."""
    with journal.locked():
        journal.con.execute(_TABLE)
        rows = journal.con.execute("SELECT seq, evaluation FROM unrecorded WHERE key = ? "
                                   "ORDER BY seq", (key,)).fetchall()
        for seq, text in rows:
            try:
                ev = Evaluation.model_validate_json(text)
            except (ValidationError, ValueError) as err:  # another version's row
                logger.info("ignoring an unreadable kept evaluation of %s: %s", key[:12], err)
                continue
            if more is not None and ev.measurement is not None and more(ev.measurement):
                continue
            journal.con.execute("DELETE FROM unrecorded WHERE seq = ?", (seq,))
            return ev
    return None
