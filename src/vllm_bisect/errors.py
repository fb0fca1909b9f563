"""The exception tree of vllm-bisect.

Every error the tool raises on purpose derives from :class:`BisectError` and carries a
``hint`` that says what to do about it. The tree has two branches, and the branch decides
what the driver does::

    BisectError
    ├── RecoverableError          a commit could not be tested: the commit is SKIPPED
    │   ├── ArtifactUnavailable   no wheel / image / build for this commit (never "bad")
    │   │   ├── IndexUnavailable  not now: the index answered 5xx or 429, or stalled (not cached)
    │   │   │   └── NetworkUnavailable  the network failed (refused, reset, DNS, TLS; not cached)
    │   │   ├── BuildError        a build from source failed (log tail attached)
    │   │   └── Cancelled         a prefetch the last verdict made useless was stopped
    │   ├── ServeError            the server exited early, hung, or never became healthy
    │   │   └── PortTaken         another process answered on the server's port (retried)
    │   └── ProbeError            the probe could not finish (stream broke, HTTP error, timeout)
    │       └── StreamFormatError the server's SSE stream was malformed
    └── FatalError                the bisect cannot go on: stop and tell the user
        ├── SpecError             the spec file or a flag is invalid (names the key)
        ├── RangeError            unknown ref, good == bad, good not an ancestor of bad
        ├── NotReproduced         the endpoints do not judge good and bad as claimed
        ├── SessionError          the session directory cannot be used (locked, mismatched)
        ├── ToolMissing           a required program or daemon (git, uv, docker) is unavailable
        └── HostFault             the machine cannot go on (disk full during a pull)

Only the ``cli`` package turns these into messages and exit codes; library code raises them.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

# terminal control in text that came from elsewhere (a commit subject, a server's body or
# log): CSI and OSC escape sequences whole, other escapes, C0 and C1 controls but tab and
# newline, and the bidi overrides that reorder what a terminal or a page shows
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|"
                      r"\x9b[0-?]*[ -/]*[@-~]?|\x9d[^\x07\x1b\x9c]*[\x07\x9c]?|"
                      r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every terminal control sequence and control character removed (tab and
    newline kept): what the tool prints or writes into a report never drives a terminal."""
    return _CONTROL.sub("", text)


class BisectError(Exception):
    """Base of every error vllm-bisect raises deliberately. Its message, hint and log tail
    are :func:`printable` (they carry server bodies, log lines and commit subjects)."""

    def __init__(self, message: str, *, hint: str = "", log_tail: str = "",
                 log: Path | None = None) -> None:
        message, hint, log_tail = printable(message), printable(hint), printable(log_tail)
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.log_tail = log_tail
        self.log = log  # the log to read about it (a server's, a build's), as an object

    def __str__(self) -> str:
        return self.message


class RecoverableError(BisectError):
    """The commit at hand could not be tested; the bisect skips it and goes on."""


class ArtifactUnavailable(RecoverableError):
    """No artifact (wheel, image, source build) can be had for this commit."""

    # the same answer on a later run (no wheel for this commit, a wrong build): the skip is
    # cached across sessions; False: a later run asks again
    final = True


class IndexUnavailable(ArtifactUnavailable):
    """The artifact could not be had now (the index answered 5xx or 429, the connection was
    reset or timed out): this run skips the commit, a later run asks again."""

    final = False


class NetworkUnavailable(IndexUnavailable):
    """The network failed on the way to the artifact (a connection refused or reset, a name
    that does not resolve, a TLS error, a download cut off): not the commit's fault, so never
    its cached result, and every other commit would fail the same way now. Raised where the
    failure is seen: an httpx transport error, or a tool's own output read once where the
    builder ran it (pip, uv, docker pull: :mod:`vllm_bisect.builders.netfail`)."""


class BuildError(ArtifactUnavailable):
    """Building the commit from source failed."""


class Cancelled(ArtifactUnavailable):
    """A prefetch was cancelled (its artifact is not needed any more)."""


class ServeError(RecoverableError):
    """The server for a commit died, hung or never answered /health."""


class PortTaken(ServeError):
    """The server could not have its port: another process listens on it (two servers picked
    the same free port at once). Not the commit's fault: the launcher tries another port."""


class ProbeError(RecoverableError):
    """The probe could not finish against a running server."""


class StreamFormatError(ProbeError):
    """The server sent a streaming response that does not follow vLLM's SSE format."""


class WrongModel(RecoverableError):
    """The server serves another model than the spec's (its ``/v1/models`` or the stream's
    ``model`` field names another): a skip, never a verdict, and never a crash (a server
    of another model says nothing about this commit's vLLM)."""


class FatalError(BisectError):
    """The bisect cannot continue; the CLI prints the message and exits non-zero."""


class SpecError(FatalError):
    """The spec (TOML file or CLI flags) is invalid."""


class RangeError(FatalError):
    """The commit range is invalid: unknown refs, or good is not an ancestor of bad."""


class NotReproduced(FatalError):
    """An endpoint did not judge as claimed (good judged bad, bad judged good, or untestable)."""


class RestUndecided(NotReproduced):
    """A rest check that its server budget (``verdict.rest_servers``) left undecided."""


class RestExplained(NotReproduced):
    """A rest check that found no further change that matters: the culprit explains it."""


class SessionError(FatalError):
    """The session directory cannot be used."""


class ToolMissing(FatalError):
    """A program the chosen builder or runtime needs is not installed."""


class HostFault(FatalError):
    """The host cannot continue the bisect (e.g. no space left while pulling an image)."""


def disk_full(err: BaseException, where: str = "") -> HostFault | None:
    """The project's disk-full error for an OSError (ENOSPC, EDQUOT), an SQLite "database
    or disk is full", or a file size limit (EFBIG: ``ulimit -f``); None for anything else."""
    import errno
    import sqlite3

    at = f" ({where})" if where else ""
    if isinstance(err, OSError) and err.errno == errno.EFBIG:
        return _size_limit(f"{err}{at}")
    full = (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)) or (
        isinstance(err, sqlite3.OperationalError) and "disk is full" in str(err))
    if not full:
        return None
    return HostFault(f"no space left on the device{at}: {err}",
                     hint="free disk space or run `vllm-bisect cache prune --max-size ...`; "
                          "then resume the session (nothing recorded was moved or lost)")


def _size_limit(what: str) -> HostFault:
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    limit = "" if soft == resource.RLIM_INFINITY else f" of {soft} bytes"
    return HostFault(f"a file size limit{limit} (ulimit -f) stopped a write: {what}",
                     hint="raise the limit (`ulimit -f unlimited`) and run again (nothing "
                          "recorded was moved or lost)")


def storage_fault(err: BaseException, path: Path) -> HostFault | None:
    """:func:`disk_full`, or an SQLite I/O error (SQLite reports ENOSPC and EFBIG as "disk
    I/O error" or "unable to open database file") where the filesystem holding ``path`` is
    full or this process has a file size limit: the storage's fault, named as such, never a
    damaged database."""
    import os
    import resource
    import sqlite3

    fault = disk_full(err, str(path))
    if fault is not None or not isinstance(err, sqlite3.OperationalError):
        return fault
    if not any(s in str(err) for s in ("disk I/O error", "unable to open database file")):
        return None
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None:
        with contextlib.suppress(OSError):
            st = os.statvfs(existing)
            if st.f_bavail * st.f_frsize < FULL_BELOW_BYTES:
                return HostFault(f"no space left on the device ({path}): {err} (the "
                                 f"filesystem has {st.f_bavail * st.f_frsize} bytes free)",
                                 hint="free disk space or run `vllm-bisect cache prune "
                                      "--max-size ...`; then resume the session (nothing "
                                      "recorded was moved or lost)")
    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return _size_limit(f"{err} ({path})")
    return None


# a filesystem with less free space than this is full for SQLite (a page, its WAL, its -shm)
FULL_BELOW_BYTES = 1 << 20


def untestable_hint(log: Path | None, *, network: bool = False, transient: bool = False,
                    advice: str = "", role: str = "good") -> str:
    """The hint when an endpoint could not be tested. A network failure
    (:class:`NetworkUnavailable`, the evaluation's ``network``) is not the commit's fault:
    other endpoints would fail the same way, so say network and what to do; an index that
    answered "not now" (``transient``: 5xx, 429, a stall) asks for a later run; then the
    builder's own advice when it gave one (``advice``: "set build.full_build = true to
    compile" for a compiled change under a precompiled build); otherwise its server log when
    it has one (a serve command that fails at every commit is wrong itself, not the commit).
    ``role``: which endpoint ("good" or "bad"; the other commit to pick is of that kind)."""
    other = f"pick {'a bad' if 'bad' in role else 'a good'} commit that builds and serves"
    if network:
        return ("it failed for a network reason, not because of the commit: check the network "
                "(build.index_url, a proxy, DNS) and run the same command again (a network "
                "failure is not cached as the commit's result); other endpoints would fail "
                "the same way")
    if transient:
        return ("the index answered \"not now\" (a server error, a rate limit or a stall), not "
                "because of the commit: run the same command again later (this answer is not "
                "cached as the commit's result)")
    if advice:
        return f"{advice}; or {other}"
    if log is not None:
        return (f"read its log {log}: if the serve command fails at every commit, "
                f"fix the command or serve arguments; otherwise {other}")
    return other
