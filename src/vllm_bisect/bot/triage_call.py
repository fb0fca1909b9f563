"""The bot's one call into triage: an issue body in, what it asks for out — bounded.

Issue bodies are written by anyone, so triage runs in a child process: on at most
``max_chars`` characters of the body, under a wall-clock limit (killed when it runs over) and
CPU/memory rlimits, with the allowlisted environment. A slow or crashing triage costs one
child, never the webhook's event loop or the bot's memory. ``python -m
vllm_bisect.bot.triage_call`` is that child: the body on stdin, JSON on stdout.
"""

from __future__ import annotations

import json
import logging
import resource
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from vllm_bisect.runtime.childenv import child_env

logger = logging.getLogger(__name__)
MEMORY_LIMIT = 2 << 30


@dataclass(frozen=True)
class IssueReading:
    """What triage found in the issue body (empty when it could not be read)."""

    found: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def comment(self) -> str:
        """What was read, from which line, what is unknown (triage.comment_markdown)."""
        text = self.found.get("comment")
        return text if isinstance(text, str) else ""


def _limits(cpu_s: int) -> None:  # the child sets its own (no preexec_fn in a threaded bot)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def read_issue(body: str, max_chars: int, timeout_s: float) -> IssueReading:
    """Triage the first ``max_chars`` characters of ``body`` within ``timeout_s``."""
    notes: list[str] = []
    if len(body) > max_chars:
        notes.append(f"only the first {max_chars} characters of the issue were read")
        body = body[:max_chars]
    if not body.strip():
        return IssueReading(notes=tuple(notes))
    cpu = max(1, int(timeout_s) + 1)
    try:
        r = subprocess.run([sys.executable, "-m", "vllm_bisect.bot.triage_call", str(cpu)],
                           input=body.encode("utf-8", "replace"), capture_output=True,
                           timeout=timeout_s, env=child_env(), check=False)
    except subprocess.TimeoutExpired:
        logger.warning("triage of an issue body ran over %.0f s; stopped", timeout_s)
        return IssueReading(notes=(*notes, f"reading the issue took over {timeout_s:.0f} s "
                                           "and was stopped"))
    try:
        found = json.loads(r.stdout) if r.returncode == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        logger.warning("triage of an issue body failed (exit %d)", r.returncode)
        return IssueReading(notes=(*notes, "the issue could not be read"))
    return IssueReading(found=found, notes=tuple(notes))


def main() -> None:
    _limits(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
    from vllm_bisect.bot.values import env_assignments
    from vllm_bisect.triage import comment_markdown, compare_command, spec_from_triage, triage

    text = sys.stdin.buffer.read().decode("utf-8", "replace")
    t = triage(text)
    spec = spec_from_triage(t)
    out = {"good": t.good, "bad": t.bad, "search": spec["range"].get("search"),
           "symptom": spec["verdict"]["symptom"] if t.symptom else None,
           "verdict": {k: v for k, v in spec["verdict"].items() if k != "symptom"},
           "probe": spec["probe"], "model": spec["serve"].get("model"),
           "speculative": t.speculative, "args": spec["serve"]["args"], "env": t.env,
           "env_all": env_assignments(text),
           "comment": comment_markdown(t, compare_command(t), started=False)}
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
