"""The webhook payloads the bot reads, validated (pydantic; a mismatch is a 400, not a 500).

Only the fields the bot uses are declared (GitHub sends many more; they are ignored). Types
are strict: an issue number is a JSON integer in range, not a list, a string or ``true``; a
comment is an object; a repository name cannot walk out of ``/repos/{owner}/{repo}``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = ["EventKind", "IssueCommentEvent", "IssuesEvent", "PingEvent", "ValidationError",
           "parse_event", "validation_summary"]

Login = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}(\[bot\])?$")]


class EventKind(StrEnum):
    PING = "ping"
    ISSUE_COMMENT = "issue_comment"
    ISSUES = "issues"


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class User(_Payload):
    login: Login
    type: str = "User"


class Repository(_Payload):
    full_name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")

    @field_validator("full_name")
    @classmethod
    def _no_dots(cls, v: str) -> str:
        if any(part in (".", "..") for part in v.split("/")):
            raise ValueError("a repository name cannot be . or ..")
        return v


class Issue(_Payload):
    number: int = Field(gt=0, lt=1 << 31)
    body: str | None = None
    user: User | None = None   # who filed it (their comments may correct its form)


class Comment(_Payload):
    id: int = Field(ge=0, lt=1 << 63)
    body: str = Field(max_length=262144)
    user: User
    author_association: str = Field(default="NONE", max_length=40)


class Label(_Payload):
    name: str = Field(max_length=256)


class PingEvent(_Payload):
    zen: str | None = None


class IssueCommentEvent(_Payload):
    action: str = Field(max_length=40)
    issue: Issue
    comment: Comment
    repository: Repository
    sender: User


class IssuesEvent(_Payload):
    action: str = Field(max_length=40)
    issue: Issue
    repository: Repository
    sender: User
    label: Label | None = None


Event = PingEvent | IssueCommentEvent | IssuesEvent
MODELS: dict[EventKind, type[PingEvent] | type[IssueCommentEvent] | type[IssuesEvent]] = {
    EventKind.PING: PingEvent, EventKind.ISSUE_COMMENT: IssueCommentEvent,
    EventKind.ISSUES: IssuesEvent}


def parse_event(kind: EventKind, body: bytes) -> Event:
    """The payload of a delivery of ``kind``; raises ValidationError (also for bad JSON)."""
    return MODELS[kind].model_validate_json(body)


def validation_summary(err: ValidationError, limit: int = 3) -> str:
    """'issue.number: Input should be a valid integer; ...' (no input values echoed)."""
    parts = [".".join(map(str, e["loc"])) + ": " + e["msg"] for e in err.errors()[:limit]]
    return "; ".join(parts) or "invalid payload"
