"""What a requested value is, checked as what it is: a hub id, a flag value, an env name.

A model name is a Hugging Face hub id (``org/name``: each part starts and ends with a letter
or digit, holds only letters, digits and ``. _ -``, never ``..`` or ``--``, at most 96
characters), so ``Qwen/..`` or ``/etc`` never reach ``vllm serve``. A flag whose value vLLM
reads as a file or directory (``--generation-config``, ``--chat-template``, ``--tokenizer``,
``--download-dir`` ...) takes only its keywords (``auto``, ``vllm``), never a name that would
resolve against the bot's working directory. Environment variables that change which code a
process loads (``LD_PRELOAD``, ``PYTHONPATH`` ...) are never set from a request.
"""

from __future__ import annotations

import re

_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
HUB_ID = re.compile(rf"^{_PART}/{_PART}$")

# flags whose value vLLM opens as a path (or a hub id), and the keywords each also takes
PATH_FLAGS: dict[str, frozenset[str]] = {
    "--generation-config": frozenset({"auto", "vllm"}),
    "--chat-template": frozenset(),
    "--tokenizer": frozenset(),
    "--download-dir": frozenset(),
    "--hf-config-path": frozenset(),
    "--config": frozenset(),
    "--lora-modules": frozenset(),
    "--prompt-adapters": frozenset(),
    "--ssl-keyfile": frozenset(),
    "--ssl-certfile": frozenset(),
    "--ssl-ca-certs": frozenset(),
    "--allowed-local-media-path": frozenset(),
    "--tool-parser-plugin": frozenset(),
    "--qlora-adapter-name-or-path": frozenset(),
    "--speculative-model": frozenset(),
    "--dataset-path": frozenset(),
    "--result-dir": frozenset(),
    "--output-json": frozenset(),
}
PATH_SUFFIX = re.compile(r"-(?:path|dir|file|keyfile|certfile|certs|template|plugin|json)$")
# loader and interpreter variables: a request never sets them, whatever bot.toml allows
CODE_ENV = re.compile(r"^(?:LD_\w+|DYLD_\w+|PYTHON\w*|PATH|HOME|BASH_ENV|ENV|PERL5LIB|"
                      r"NODE_OPTIONS|RUBYOPT|GCONV_PATH|MALLOC_\w+|GLIBC_TUNABLES)$")
# ``NAME=value`` in an issue body, at the start of a word (``export NAME=v`` too)
ENV_ASSIGNMENT = re.compile(r"(?<![\w$/.=-])(?P<k>[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|PYTHON[A-Z]+|"
                            r"PATH|HOME|ENV|PERL5LIB|RUBYOPT)"
                            r"=(?P<v>[^\s'\"`;&|]{0,200})")


def is_hub_id(name: object) -> bool:
    """``org/name`` as the hub accepts it (no ``..``, no ``--``, no path)."""
    return (isinstance(name, str) and bool(HUB_ID.match(name)) and ".." not in name
            and "--" not in name)


def is_path_flag(flag: str) -> bool:
    return flag in PATH_FLAGS or bool(PATH_SUFFIX.search(flag))


def path_value_refusal(flag: str, value: str) -> str | None:
    """Why ``value`` may not be given to ``flag`` (None when it may)."""
    if value.strip(".") == "" or ".." in value:
        return "its value names a directory"
    if is_path_flag(flag) and value not in PATH_FLAGS.get(flag, frozenset()):
        keywords = sorted(PATH_FLAGS.get(flag, frozenset()))
        return ("the flag reads a file or directory"
                + (f"; only {', '.join(keywords)} may be requested" if keywords else ""))
    return None


def env_assignments(text: str) -> dict[str, str]:
    """Every ``NAME=value`` in ``text`` (an issue body), in order, the first value of each."""
    out: dict[str, str] = {}
    for m in ENV_ASSIGNMENT.finditer(text):
        out.setdefault(m.group("k"), m.group("v"))
    return out
