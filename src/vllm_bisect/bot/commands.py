"""``/bisect`` comments and labeled issues -> a validated job spec (nothing is executed)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from pydantic import ValidationError

from vllm_bisect.bot.config import BotConfig
from vllm_bisect.bot.policy import REF, SYMPTOMS, Allowlist, JobPlan, effective_spec
from vllm_bisect.bot.triage_call import read_issue
from vllm_bisect.bot.values import is_hub_id
from vllm_bisect.errors import SpecError
from vllm_bisect.spec import BisectSpec

COMMAND = re.compile(r"^/bisect\b(?P<args>[^\n]*)$", re.MULTILINE)
GO = "go"   # `/bisect go [key=value ...]`: run the range triage read (confirm it)


def find_command(comment: str) -> str | None:
    m = COMMAND.search(comment)
    return m.group("args").strip() if m else None


def split_go(args: str | None) -> tuple[bool, str]:
    """(go, the rest): ``go`` counts only as the first word of the arguments."""
    words = (args or "").split()
    if words[:1] == [GO]:
        return True, " ".join(words[1:])
    return False, " ".join(words)


def parse_command(args: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in args.split():
        key, sep, value = word.partition("=")
        if not sep or key not in ("good", "bad", "symptom", "model"):
            raise SpecError(f"unknown /bisect argument {word[:80]!r}",
                            hint=f"use /bisect good=<ref> bad=<ref> [symptom={'|'.join(SYMPTOMS)}] "
                                 "[model=org/name], a bare /bisect to triage the issue, or "
                                 "/bisect go to run the range it read")
        if key in ("good", "bad") and not REF.match(value):
            raise SpecError(f"{key}={value[:80]!r} is not a commit, tag or version")
        if key == "symptom" and value not in SYMPTOMS:
            raise SpecError(f"symptom={value[:80]!r}: use one of {', '.join(SYMPTOMS)}")
        if key == "model" and not is_hub_id(value):
            raise SpecError(f"model={value[:80]!r} is not a Hugging Face model id (org/name)")
        out[key] = value
    return out


def allowlist(cfg: BotConfig) -> Allowlist:
    return Allowlist(serve_flags=frozenset(cfg.allowed_serve_flags),
                     env=frozenset(cfg.allowed_env), models=tuple(cfg.allowed_models),
                     speculative_keys=frozenset(cfg.allowed_speculative_keys),
                     max_probe_tokens=cfg.max_probe_tokens,
                     bench_flags=frozenset(cfg.allowed_bench_flags))


def triage_comment(args: str | None, issue_body: str, max_chars: int = 32768,
                   timeout_s: float = 10.0) -> str:
    """For a bare ``/bisect`` (or a labeled issue): what was read from the issue, from which
    line, and what is unknown, as Markdown; empty when the command named its own refs.
    (job_spec returns the same text as JobPlan.read, from its one bounded triage run.)"""
    if args and args.strip():
        return ""
    return read_issue(issue_body, max_chars, timeout_s).comment


def _why_missing(key: str, found: dict[str, Any]) -> str:
    """Why the range has no ``key``: the real cause, when the issue named one the bot cannot
    run (a PR, a nightly date), not "could not determine"."""
    value, bad = found.get(key), str(found.get("bad") or "")
    if isinstance(value, str) and value.startswith("#"):
        return (f"{key} is PR {value} (read from the issue): the bot does not look up a pull "
                f"request's merge commit; give it as a commit (`/bisect go {key}=<sha>`)")
    if key == "good" and not value and bad.startswith("#"):
        return (f"good is the parent of PR {bad}'s merge commit, which the bot does not look "
                "up; give both ends as commits (`/bisect go good=<sha> bad=<sha>`)")
    if isinstance(value, str) and value.startswith("nightly-"):
        return (f"{key} is the nightly date {value[8:]} (read from the issue): the bot does not "
                f"map a date to main's commit; give the commit (`/bisect go {key}=<sha>`)")
    if value:
        return f"{key} {str(value)[:80]!r} (read from the issue) is not a commit, tag or version"
    return ""


def job_spec(cfg: BotConfig, args: str | None, issue_body: str) -> JobPlan:
    """The job: the operator's base spec, plus what the command arguments and the issue's
    triage may set under the operator's allowlist (see policy.py); ``triaged`` names the refs
    read from the issue rather than typed (the handler asks before running those, and then
    ``read`` holds what triage read). Raises SpecError."""
    given = parse_command(args) if args else {}
    reading = read_issue(issue_body, cfg.triage_max_chars, cfg.triage_timeout_s)
    found = dict(reading.found)
    found.pop("repo", None)
    plan = effective_spec(cfg.base_spec, given, found, allowlist(cfg))
    rng = plan.spec.get("range", {})
    triaged = tuple(k for k in ("good", "bad")
                    if k not in given and found.get(k) and rng.get(k) == found.get(k))
    plan = dataclasses.replace(plan, notes=plan.notes + reading.notes, triaged=triaged,
                               read=reading.comment if triaged or not given else "")
    missing = [k for k in ("good", "bad") if not rng.get(k)]
    if missing:
        causes = {k: _why_missing(k, {} if k in given else found) for k in missing}
        plain = [k for k in missing if not causes[k]]
        said = ([f"could not determine {' and '.join(plain)} from the issue"] if plain else [])
        raise SpecError("; ".join(said + [c for c in causes.values() if c])
                        + (f" ({'; '.join(reading.notes)})" if reading.notes else ""),
                        hint=plan.read or "comment /bisect good=<ref> bad=<ref>")
    try:  # validate now, answer with the key if wrong (never with values: env may hold secrets)
        BisectSpec.model_validate(plan.spec)
    except ValidationError as err:
        keys = "; ".join(".".join(map(str, e["loc"])) + (": " if e["loc"] else "") + e["msg"]
                         for e in err.errors()[:5])
        raise SpecError(f"the bisect request does not make a valid spec: {keys}",
                        hint="check the /bisect arguments, or ask the bot's operator about "
                             "its base_spec") from None
    return plan
