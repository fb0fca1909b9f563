"""A server command line as vLLM reads it: which words start the server, which is the model,
and vLLM's own argument spellings (nothing is run; words come from shlex).

- **Where the flags start.** ``vllm serve MODEL ...``; ``python -m
  vllm.entrypoints.openai.api_server --model MODEL ...``; ``docker run [docker's options]
  IMAGE [MODEL] ...`` for a vLLM image (its entrypoint is the server: the words after the
  image are the server's).
- **Dotted JSON flags** (vLLM's ``FlexibleArgumentParser``): ``--speculative-config.method mtp
  --speculative-config.num_speculative_tokens 1`` is ``--speculative-config '{"method": "mtp",
  "num_speculative_tokens": 1}'``; ``--x.key=value`` too; ``--x.key+ a,b`` appends to a list; a
  value is JSON when it parses as JSON, else the string; underscores in the flag's name (before
  the first ".") are dashes, the keys are kept as written.
- **Short aliases** vLLM declares (``-tp``, ``-pp``, ``-dp``) are their long flags.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

SERVER_START = re.compile(
    r"\bvllm\s{1,3}serve\b[^\n`]{0,2000}|"
    r"\bpython\d?(?:\.\d{1,2})?\s{1,3}-m\s{1,3}vllm\.entrypoints\.openai\.api_server\b[^\n`]{0,2000}|"
    r"\bdocker\s{1,3}run\b[^\n`]{1,2000}")
VLLM_IMAGE = re.compile(r"^(?:[\w.-]{1,60}/){0,3}(?:vllm-openai(?:-rocm)?|vllm-release-repo|"
                        r"vllm-ci-postmerge-repo|vllm)(?::[\w.+-]{1,80})?(?:@sha256:[0-9a-f]{64})?$")
ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size",
           "-dp": "--data-parallel-size"}
# docker run's options that take a value (the image is the first word that is not one of them)
DOCKER_VALUED = frozenset({"-e", "--env", "-v", "--volume", "-p", "--publish", "--name",
                           "--gpus", "--ipc", "--shm-size", "--network", "--net", "-w",
                           "--workdir", "--entrypoint", "--runtime", "--device", "-u", "--user",
                           "--env-file", "--ulimit", "--platform", "--mount", "--cap-add",
                           "--security-opt", "--group-add", "--memory", "-m", "--cpus",
                           "--label", "-l", "--hostname", "-h", "--pid", "--restart"})


@dataclass(frozen=True)
class ServerCommand:
    how: str                       # "vllm serve", "api_server", "docker run <image>"
    model: str | None              # the model word as written (positional or --model)
    args: list[str]                # the server's other words, aliases spelled long
    dotted: dict[str, Any] = field(default_factory=dict)  # "speculative-config" -> {...}
    notes: list[str] = field(default_factory=list)


def _flag_name(word: str) -> str:
    """vLLM's spelling of a flag's name: underscores before the first "." are dashes."""
    head, dot, rest = word.partition(".")
    return head.replace("_", "-") + dot + rest if head.startswith("--") else word


def _nested(keys: list[str], value: Any) -> dict[str, Any]:
    out: Any = value
    for key in reversed(keys):
        out = {key: out}
    return out  # type: ignore[no-any-return]


def _merge(into: dict[str, Any], update: dict[str, Any], path: str, dupes: list[str]) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v, f"{path}.{k}", dupes)
        elif isinstance(v, list) and isinstance(into.get(k), list):
            into[k] += v
        else:
            if k in into:
                dupes.append(f"{path}.{k}")
            into[k] = v


def dotted_args(words: list[str]) -> tuple[list[str], dict[str, Any], list[str]]:
    """(the words without vLLM's dotted JSON flags, those flags as dicts by flag name, notes)."""
    out: list[str] = []
    dicts: dict[str, dict[str, Any]] = {}
    dupes: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if not (word.startswith("--") and "." in name):
            out.append(_flag_name(word) if word.startswith("--") and not eq else
                       (_flag_name(name) + "=" + value if word.startswith("--") else word))
            i += 1
            continue
        if not eq:
            if i + 1 >= len(words):
                out.append(word)
                break
            value = words[i + 1]
            i += 1
        i += 1
        name = _flag_name(name)
        parsed: Any
        if name.endswith("+"):
            name, parsed = name[:-1], value.split(",")
        else:
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = value
        flag, *keys = name.split(".")
        if not all(keys):
            continue
        _merge(dicts.setdefault(flag.lstrip("-"), {}), _nested(keys, parsed), flag, dupes)
    notes = [f"{d} is given twice: vLLM takes the last" for d in dupes]
    return out, dicts, notes


def _docker_words(words: list[str]) -> tuple[str, list[str]] | None:
    """(the image, the words after it) of ``docker run ...``, or None (no vLLM image)."""
    i = 2
    while i < len(words):
        w = words[i]
        if w.startswith("-"):
            i += 2 if w in DOCKER_VALUED else 1
            continue
        if not VLLM_IMAGE.match(w):
            return None
        rest = words[i + 1:]
        if rest[:2] == ["vllm", "serve"]:
            rest = rest[2:]
        elif len(rest) >= 3 and rest[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]:
            rest = rest[3:]
        return w, rest
    return None


def server_command(words: list[str]) -> ServerCommand | None:
    """The server command ``words`` (a shlex split, from its first word) start, or None."""
    if words[:2] == ["vllm", "serve"]:
        how, rest = "vllm serve", words[2:]
    elif len(words) >= 3 and words[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]:
        how, rest = "python -m vllm.entrypoints.openai.api_server", words[3:]
    elif words[:2] == ["docker", "run"] and (found := _docker_words(words)) is not None:
        how, rest = f"docker run {found[0]}", found[1]
    else:
        return None
    model = None
    if rest and not rest[0].startswith("-"):
        model, rest = rest[0], rest[1:]
    rest, dicts, notes = dotted_args(rest)
    args: list[str] = []
    i = 0
    while i < len(rest):
        w = rest[i]
        if w in ("--model", "--model-tag") and i + 1 < len(rest):
            model = model or rest[i + 1]
            i += 2
            continue
        if w.startswith("--model="):
            model = model or w.split("=", 1)[1]
            i += 1
            continue
        alias, eq, value = w.partition("=")
        if alias in ALIASES:
            args += [ALIASES[alias], value] if eq else [ALIASES[alias]]
        else:
            args.append(w)
        i += 1
    return ServerCommand(how, model, args, dicts, notes)
