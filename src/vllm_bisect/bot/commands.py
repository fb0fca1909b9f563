"""``/bisect`` comments and labeled issues -> a validated job spec (nothing is executed)."""

from __future__ import annotations

import re
from typing import Any

from vllm_bisect.errors import SpecError
from vllm_bisect.spec import parse_spec
from vllm_bisect.triage import comment_markdown, compare_command, spec_from_triage, triage

COMMAND = re.compile(r"^/bisect\b(?P<args>[^\n]*)$", re.MULTILINE)
REF = re.compile(r"^(?:[0-9a-f]{7,40}|v?\d+\.\d+\.\d+(?:rc\d+)?(?:\.dev\d+)?|[\w.-]{1,80})$")
MODEL = re.compile(r"^[\w.-]+/[\w.-]+$")
SYMPTOMS = ("length", "itl", "correctness", "any")


def find_command(comment: str) -> str | None:
    m = COMMAND.search(comment)
    return m.group("args").strip() if m else None


def parse_command(args: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in args.split():
        key, sep, value = word.partition("=")
        if not sep or key not in ("good", "bad", "symptom", "model"):
            raise SpecError(f"unknown /bisect argument {word!r}",
                            hint="use /bisect good=<ref> bad=<ref> [symptom=length|itl|any] "
                                 "[model=org/name], or a bare /bisect to triage the issue")
        if key in ("good", "bad") and not REF.match(value):
            raise SpecError(f"{key}={value!r} is not a commit, tag or version")
        if key == "symptom" and value not in SYMPTOMS:
            raise SpecError(f"symptom={value!r}: use one of {', '.join(SYMPTOMS)}")
        if key == "model" and not MODEL.match(value):
            raise SpecError(f"model={value!r} is not a Hugging Face model id (org/name)")
        out[key] = value
    return out


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def triage_comment(args: str | None, issue_body: str) -> str:
    """For a bare ``/bisect`` (or a labeled issue): what was read from the issue, from which
    line, and what is unknown, as Markdown; empty when the command named its own refs."""
    if args and args.strip():
        return ""
    t = triage(issue_body)
    return comment_markdown(t, compare_command(t), started=False)


def job_spec(base_spec: dict[str, Any], args: str | None, issue_body: str) -> dict[str, Any]:
    """The job's spec: the bot's base spec, then the issue's triage, then explicit arguments."""
    t = triage(issue_body)
    found = spec_from_triage(t)
    found["range"].pop("repo", None)
    found.pop("build", None)  # how artifacts are obtained is the bot operator's choice
    spec = _merge(base_spec, found)
    if args:
        given = parse_command(args)
        for key, section in (("good", "range"), ("bad", "range"), ("symptom", "verdict"),
                             ("model", "serve")):
            if key in given:
                spec.setdefault(section, {})[key] = given[key]
    missing = [k for k in ("good", "bad") if not spec.get("range", {}).get(k)]
    if missing:
        raise SpecError(f"could not determine {' and '.join(missing)} from the issue",
                        hint=triage_comment(args, issue_body)
                        or "comment /bisect good=<ref> bad=<ref>")
    parse_spec(spec, source="bisect request")  # validate now, answer with the key if wrong
    return spec
