"""A nightly named by its date ("nightly-2026-01-15", from the form): main's commits of that
day. Which commit a nightly was built from is not in its date, so the range is widened to
hold every commit it could have been: the old end is main's last commit before the day
starts (UTC), the new end main's last commit before the next day starts. The endpoint check
then proves both ends before any search."""

from __future__ import annotations

import datetime as dt
import re

import git

from vllm_bisect.triage.values import Read, Triage

NIGHTLY_REF = re.compile(r"nightly-(?P<date>\d{4}-\d{2}-\d{2})")


def nightly_unknown(attr: str, ref: str) -> str:
    return (f"{attr} {ref} is a nightly date: pass --repo to map it to main's commits of that "
            "day, or give the nightly's commit (vllm --version prints it as +g<sha>)")


def resolve_nightlies(t: Triage, repo: git.Repo, main: str | None) -> None:
    """Nightly dates in ``t.good``/``t.bad`` to commits of main, in place (said so)."""
    for attr, role, days in (("good", "old", 0), ("bad", "new", 1)):
        ref = getattr(t, attr) or ""
        m = NIGHTLY_REF.fullmatch(ref)
        if m is None:
            continue
        day = dt.date.fromisoformat(m.group("date")) + dt.timedelta(days=days)
        before = f"{day.isoformat()}T00:00:00+00:00"
        try:
            sha = repo.git.rev_list("-1", "--first-parent", f"--before={before}",
                                    main or "HEAD").strip()
        except git.GitCommandError:
            sha = ""
        if not sha:
            t.warnings.append(f"{attr} {ref}: {main or 'HEAD'} has no commit before {before} "
                              "(try `git fetch`, or give the nightly's commit)")
            continue
        t.unknowns = [u for u in t.unknowns if u != nightly_unknown(attr, ref)]
        term = t.old_term if attr == "good" else t.new_term
        t.read.append(Read(f"range.{attr} ({term})", sha[:12], None,
                           f"{ref}: the last commit on {main or 'HEAD'} before {before} (a "
                           f"nightly's commit is not in its date: the range holds that whole day)"))
        setattr(t, attr, sha)
        t.candidates[role] = [sha]
