"""A session pins its range: ``range.good`` / ``range.bad`` are resolved to commits once,
when the session starts, and kept in its journal. A resume bisects the pinned commits, says
when a ref now points elsewhere (a branch moved, force-pushed), and refuses clearly when a
pinned commit is gone from the repository (rewritten and pruned): it never searches another
range under the session's name."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import git

from vllm_bisect.bisect.range import CommitRange, commit_range, resolve_ref
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.errors import RangeError
from vllm_bisect.spec import RangeSpec

PIN_KEY = "range_pin"


@dataclass(frozen=True)
class Pin:
    """The refs as written and the commits they resolved to when the session started."""

    good_ref: str
    bad_ref: str
    good: str
    bad: str
    first_parent: bool

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def stored_pin(session_dir: Path) -> Pin | None:
    """The pin an earlier run of this session recorded (None: a new session, or one from
    before pins; a journal that cannot be read is left to the session to report)."""
    if not (session_dir / "journal.sqlite").is_file():
        return None
    try:
        j = SessionJournal(session_dir)
        try:
            raw = j.get_meta(PIN_KEY)
        finally:
            j.close()
        return Pin(**json.loads(raw)) if raw else None
    except (sqlite3.DatabaseError, ValueError, TypeError):
        return None


def session_range(repo: git.Repo, spec: RangeSpec, session_dir: Path
                  ) -> tuple[CommitRange, Pin]:
    """The range this session bisects and its pin: the stored one when the session has one
    for the same refs (notes say where a ref points now, if elsewhere), else the refs
    resolved now (the pin to store)."""
    good_ref, bad_ref = spec.good or "", spec.bad or ""
    pin = stored_pin(session_dir)
    if pin is None or (pin.good_ref, pin.bad_ref, pin.first_parent) != (
            good_ref, bad_ref, spec.first_parent):
        rng = commit_range(repo, spec.good, spec.bad, spec.first_parent)
        return rng, Pin(good_ref, bad_ref, rng.good.sha, rng.bad.sha, spec.first_parent)
    for what, ref, sha in (("good", pin.good_ref, pin.good), ("bad", pin.bad_ref, pin.bad)):
        try:
            repo.commit(sha)
        except (git.BadName, ValueError):
            raise RangeError(
                f"this session's {what} commit {sha[:12]} (range.{what} = {ref!r} when it "
                f"started) is no longer in the repository {repo.working_dir}: {ref!r} was "
                "rewritten and the old commits pruned, so this session's range cannot be "
                "bisected any more",
                hint="start a new session (another --session) to bisect the range as it is "
                     "now, or fetch the old commits back") from None
    rng = commit_range(repo, pin.good, pin.bad, pin.first_parent)
    moved = _moved(repo, pin)
    return replace(rng, notes=(*rng.notes, *moved)), pin


def _moved(repo: git.Repo, pin: Pin) -> list[str]:
    """A note for each ref that now resolves to another commit than the pinned one."""
    try:  # (as the session resolved them: a release tag mapped to its branch point)
        now = commit_range(repo, pin.good_ref, pin.bad_ref, pin.first_parent)
        where = {"good": now.good.sha, "bad": now.bad.sha}
    except RangeError:  # (no range any more, e.g. good not an ancestor of the new bad)
        where = {}
        for what, ref in (("good", pin.good_ref), ("bad", pin.bad_ref)):
            try:
                where[what] = resolve_ref(repo, ref, what).hexsha
            except RangeError:
                where[what] = ""
    notes = []
    for what, ref, sha in (("good", pin.good_ref, pin.good), ("bad", pin.bad_ref, pin.bad)):
        if where[what] == sha:
            continue
        now_text = (f"now points to {where[what][:12]}" if where[what] else
                    "no longer resolves")
        notes.append(f"range.{what} = {ref!r} {now_text}; this session keeps the commit it "
                     f"pinned when it started, {sha[:12]} (start a new --session to bisect "
                     "the range as it is now)")
    return notes
