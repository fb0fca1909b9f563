"""What a bisect request may change: the operator's base_spec plus an allowlist, nothing else.

A request is the ``/bisect`` arguments (typed by a maintainer) and what triage read in the
issue body (typed by anyone). The job's spec starts from the operator's ``base_spec``; the
request may pick the range, the symptom, and — only where ``bot.toml`` allows — a model, serve
flags, environment variables and speculative-config keys. Every other item is refused and
named in the reply. base_spec's own args, env, speculative config and probe are never
overridden, and nothing here reaches a shell: args are an argv, env a mapping, and values
with a path or special characters are refused.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from vllm_bisect.bot.values import CODE_ENV, is_hub_id, path_value_refusal
from vllm_bisect.runtime.childenv import is_secret_name
from vllm_bisect.symptoms import Symptom

REF = re.compile(r"^(?:[0-9a-f]{7,40}|v?\d+\.\d+\.\d+(?:rc\d+)?(?:\.dev\d+)?|[\w][\w.-]{0,79})$")
# (from the symptoms' registry) what a maintainer may name in `/bisect symptom=...`; what
# triage may set from an issue (every symptom); the verdict numbers triage may size
SYMPTOMS = tuple(s.value for s in Symptom if s.info.bot_command)
TRIAGE_SYMPTOMS = tuple(s.value for s in Symptom)
VERDICT_NUMBERS = tuple(k for s in Symptom for k in s.info.tunable)
VALUE = re.compile(r"^[A-Za-z0-9_.,:+-]{1,64}$")   # no "/", no spaces, no quotes, no "="
METHOD = re.compile(r"^[a-z0-9_]{1,32}$")


@dataclass(frozen=True)
class Allowlist:
    serve_flags: frozenset[str]
    env: frozenset[str]
    models: tuple[str, ...] = ()
    speculative_keys: frozenset[str] = frozenset({"method", "num_speculative_tokens"})
    max_probe_tokens: int = 16384
    bench_flags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class JobPlan:
    spec: dict[str, Any]
    refused: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    requested_env: tuple[str, ...] = ()   # env keys the request set (their values are shown)
    read: str = ""                         # a ref from triage: what it read (Markdown)
    triaged: tuple[str, ...] = ()          # range keys ("good", "bad") read from the issue


def code(text: object, limit: int = 80) -> str:
    """``text`` as a Markdown code span: one line, no backticks, at most ``limit`` chars."""
    s = re.sub(r"[`\r\n\t]", " ", str(text))
    return "`" + (s if len(s) <= limit else s[:limit - 1] + "…") + "`"


def _flag_name(word: str) -> str:
    return word.split("=", 1)[0]


def split_flags(args: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """argv -> [(flag, value or None)] and stray words that are not flags."""
    pairs: list[tuple[str, str | None]] = []
    stray: list[str] = []
    i = 0
    while i < len(args):
        word = str(args[i])
        if not word.startswith("-"):
            stray.append(word)
            i += 1
            continue
        if "=" in word:
            name, value = word.split("=", 1)
            pairs.append((name, value))
        elif i + 1 < len(args) and not str(args[i + 1]).startswith("-"):
            pairs.append((word, str(args[i + 1])))
            i += 1
        else:
            pairs.append((word, None))
        i += 1
    return pairs, stray


def _flags(requested: list[str], allowed: frozenset[str], operator: set[str], what: str,
           setting: str, refused: list[str]) -> list[str]:
    """The allowed flags of ``requested`` (an argv), each refusal named in ``refused``."""
    pairs, stray = split_flags(requested)
    refused += [f"{what} argument {code(w)} (not a flag)" for w in stray]
    added: list[str] = []
    taken: set[str] = set()
    for flag, value in pairs:
        shown = code(flag if value is None else f"{flag} {value}")
        if flag not in allowed:
            refused.append(f"{what} flag {shown} (not in {setting})")
        elif flag in operator:
            refused.append(f"{what} flag {shown} (set by the operator)")
        elif value is not None and not VALUE.match(value):
            refused.append(f"{what} flag {shown} (its value may hold only letters, digits "
                           "and . , : + - _)")
        elif value is not None and (why := path_value_refusal(flag, value)):
            refused.append(f"{what} flag {shown} ({why})")
        elif flag not in taken:
            taken.add(flag)
            added += [flag] if value is None else [flag, value]
    return added


def _serve_args(serve: dict[str, Any], requested: list[str], allow: Allowlist,
                refused: list[str]) -> None:
    base = [str(a) for a in serve.get("args") or []]
    operator = {_flag_name(a) for a in base if a.startswith("-")}
    serve["args"] = base + _flags(requested, allow.serve_flags, operator, "serve",
                                  "allowed_serve_flags", refused)


def _int_in(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _probe(probe: dict[str, Any], requested: Any, allow: Allowlist,
           refused: list[str]) -> None:
    """Probe settings the request may add (the operator's own keys stay), bounded."""
    if not isinstance(requested, dict):
        return
    caps = {"concurrency": 64, "requests": 256, "max_tokens": allow.max_probe_tokens}
    for key, value in requested.items():
        if key in probe:
            continue
        if ((key == "endpoint" and value in ("completions", "chat"))
                or (key == "requests" and _int_in(value, 1, 20))):
            probe[key] = value
        elif key == "max_tokens" and _int_in(value, 1, 1 << 30):
            probe[key] = min(value, allow.max_probe_tokens)
        elif (key == "temperature" and isinstance(value, int | float)
              and not isinstance(value, bool) and 0 <= value <= 2):
            probe[key] = value
        elif key in ("load", "mtp_speedup") and isinstance(value, dict):
            probe[key] = {k: min(v, caps[k]) for k, v in value.items()
                          if k in caps and _int_in(v, 1, 1 << 30)}
        elif (key == "bench" and isinstance(value, dict)
              and value.get("kind") in ("serve", "throughput")):
            args = [str(a) for a in value.get("args") or []]
            probe[key] = {"kind": value["kind"],
                          "args": _flags(args, allow.bench_flags, set(), "benchmark",
                                         "allowed_bench_flags", refused)}
        else:
            refused.append(f"probe setting {code(key)}")


def _serve_env(serve: dict[str, Any], requested: dict[str, Any], allow: Allowlist,
               refused: list[str]) -> list[str]:
    env = dict(serve.get("env") or {})
    added: list[str] = []
    for key, value in requested.items():
        if CODE_ENV.match(key):
            refused.append(f"environment variable {code(key)} (it changes which code a "
                           "process loads; never set from a request)")
        elif key not in allow.env:
            refused.append(f"environment variable {code(key)} (not in allowed_env)")
        elif key in env:
            refused.append(f"environment variable {code(key)} (set by the operator)")
        elif not isinstance(value, str) or not VALUE.match(value):
            refused.append(f"environment variable {code(key)} (its value may hold only "
                           "letters, digits and . , : + - _)")
        else:
            env[key] = value
            added.append(key)
    serve["env"] = env
    return added


def _speculative(serve: dict[str, Any], requested: Any, allow: Allowlist,
                 refused: list[str]) -> None:
    if not isinstance(requested, dict) or not requested:
        return
    if serve.get("speculative"):
        if requested != serve["speculative"]:
            refused.append("speculative config " + code(requested) + " (set by the operator)")
        return
    out: dict[str, Any] = {}
    for key, value in requested.items():
        ok = key in allow.speculative_keys and (
            (key == "method" and isinstance(value, str) and METHOD.match(value)) or
            (key == "num_speculative_tokens" and type(value) is int and 1 <= value <= 16) or
            (key not in ("method", "num_speculative_tokens")
             and isinstance(value, str | int | float) and VALUE.match(str(value))))
        if ok:
            out[key] = value
        else:
            refused.append(f"speculative config key {code(f'{key}={value}')} "
                           "(not in allowed_speculative_keys, or its value is not allowed)")
    if "method" in out:
        serve["speculative"] = out


def effective_spec(base_spec: dict[str, Any], given: dict[str, str], found: dict[str, Any],
                   allow: Allowlist) -> JobPlan:
    """The job's spec: base_spec, then what ``given`` (command arguments) and ``found``
    (triage of the issue body) may set under ``allow``. Not yet validated."""
    spec = copy.deepcopy(base_spec)
    refused: list[str] = []
    rng = spec.setdefault("range", {})
    for key in ("good", "bad"):
        ref = given.get(key) or found.get(key)
        if not ref:
            continue
        if isinstance(ref, str) and REF.match(ref):
            rng[key] = ref
        else:
            refused.append(f"{key} ref {code(ref)} (not a commit, tag or version)")
    if found.get("search") in ("regression", "fix") and "search" not in rng:
        rng["search"] = found["search"]        # a fix report: find the first fixed commit
    verdict = spec.setdefault("verdict", {})
    symptom = given.get("symptom") or found.get("symptom")
    if symptom in TRIAGE_SYMPTOMS:
        verdict["symptom"] = symptom
    numbers = found.get("verdict")
    for key, value in (numbers.items() if isinstance(numbers, dict) else ()):
        if (key in VERDICT_NUMBERS and isinstance(value, int | float)
                and not isinstance(value, bool) and 0 < value < 1000 and key not in verdict):
            verdict[key] = float(value)
    _probe(spec.setdefault("probe", {}), found.get("probe"), allow, refused)
    serve = spec.setdefault("serve", {})
    model = given.get("model") or found.get("model")
    if model and model != serve.get("model"):
        if not is_hub_id(model):
            refused.append(f"model {code(model)} (not a Hugging Face hub id org/name)")
        elif any(fnmatchcase(str(model), pattern) for pattern in allow.models):
            serve["model"] = model
        else:
            refused.append(f"model {code(model)} (not in allowed_models)")
    _serve_args(serve, [str(a) for a in found.get("args") or []], allow, refused)
    env = dict(found["env"]) if isinstance(found.get("env"), dict) else {}
    every = found.get("env_all")   # NAME=value the issue set that triage does not read
    for name, value in (every.items() if isinstance(every, dict) else ()):
        env.setdefault(str(name), value)
    added = _serve_env(serve, env, allow, refused)
    _speculative(serve, found.get("speculative"), allow, refused)
    return JobPlan(spec=spec, refused=tuple(refused), requested_env=tuple(added))


def describe(plan: JobPlan, limit: int = 20) -> str:
    """The effective spec as Markdown: model, build, args, env keys (values only for what the
    request set, never for a credential-like name), then what was refused and why."""
    spec = plan.spec
    serve, build = spec.get("serve", {}), spec.get("build", {})
    r, v = spec.get("range", {}), spec.get("verdict", {})
    args = " ".join(str(a) for a in serve.get("args") or [])
    env_items = []
    for key, value in sorted((serve.get("env") or {}).items()):
        shown = (f"{key}=<redacted>" if is_secret_name(key) else
                 f"{key}={value}" if key in plan.requested_env else key)
        env_items.append(code(shown, 120))
    lines = ["Effective spec:",
             f"- range: good {code(r.get('good'))}, bad {code(r.get('bad'))}; symptom "
             f"{code(v.get('symptom', 'any'))}",
             f"- model {code(serve.get('model', 'facebook/opt-125m'))}, build "
             f"{code(build.get('kind', 'wheel'))}",
             f"- serve args: {code(args, 300) if args else 'none'}",
             f"- env: {', '.join(env_items) if env_items else 'none'}"
             + (" (values of the operator's variables are not shown)" if env_items else "")]
    if serve.get("speculative"):
        lines.append(f"- speculative config: {code(serve['speculative'], 200)}")
    probe = {k: v for k, v in (spec.get("probe") or {}).items() if k != "prompt"}
    if probe:
        lines.append(f"- probe: {code(json.dumps(probe, sort_keys=True), 300)}")
    if serve.get("pass_env"):
        lines.append("- passed from the bot's environment: "
                     + ", ".join(code(k) for k in serve["pass_env"]))
    if plan.refused:
        lines += ["", "Not applied (this bot's operator allowlists what a request may set, "
                      "in bot.toml):"]
        lines += [f"- {item}" for item in plan.refused[:limit]]
        if len(plan.refused) > limit:
            lines.append(f"- … and {len(plan.refused) - limit} more")
    if plan.notes:
        lines += ["", *(f"Note: {n}" for n in plan.notes)]
    return "\n".join(lines)
