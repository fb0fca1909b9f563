"""Prompts of a given size, cut with the served model's own tokenizer (vLLM's ``/tokenize``).

vLLM (0.25.1: ``vllm/entrypoints/serve/tokenize/``) answers ``POST /tokenize`` with
``{"count", "max_model_len", "tokens", "token_strs"}`` for ``{"model", "prompt",
"add_special_tokens": true}`` (what /v1/completions tokenizes) or ``{"model", "messages",
"add_generation_prompt": true}`` (the chat template applied, what /v1/chat/completions sees).
A prompt of about N tokens is the base prompt repeated, then cut to the longest word prefix
whose count is at most N (a binary search over words: about log2(words) calls). The count the
server reported is kept so the probe can check ``usage.prompt_tokens`` against it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx

from vllm_bisect import net
from vllm_bisect.errors import ProbeError
from vllm_bisect.spec import Endpoint

logger = logging.getLogger(__name__)

TOKENIZE_MAX_BYTES = 64 << 20  # the token ids and strings of a long prompt


@dataclass(frozen=True)
class SizedPrompt:
    text: str
    tokens: int          # the server's /tokenize count (what usage.prompt_tokens must say)
    target: int          # what was asked for
    max_model_len: int | None


class PromptSizer:
    """Builds and caches sized prompts for one served model (keyed by URL, endpoint, size)."""

    def __init__(self, base: str) -> None:
        if not base.split():
            raise ProbeError("probe.prompt is empty: a sized prompt repeats it",
                             hint="set probe.prompt to some text")
        self.base = base
        self._cache: dict[tuple[str, str, Endpoint, int], SizedPrompt] = {}

    def _count(self, client: httpx.Client, url: str, model: str, endpoint: Endpoint,
               text: str) -> tuple[int, int | None]:
        body: dict[str, Any] = {"model": model}
        if endpoint is Endpoint.CHAT:
            body |= {"messages": [{"role": "user", "content": text}],
                     "add_generation_prompt": True}
        else:
            body |= {"prompt": text, "add_special_tokens": True}
        try:
            with net.stream(client, "POST", f"{url}/tokenize", deadline_s=60.0, json=body,
                            timeout=60.0) as (r, dog):
                raw = net.read(r, dog, TOKENIZE_MAX_BYTES)
        except (httpx.HTTPError, net.NetLimitError) as err:
            raise ProbeError(f"POST {url}/tokenize failed: {err or type(err).__name__}",
                             hint="the server must expose /tokenize (vllm serve does)") from None
        text = raw[:200].decode(errors="replace")
        if r.status_code != 200:
            raise ProbeError(f"POST {url}/tokenize answered HTTP {r.status_code}: "
                             f"{text}", hint="probe.prompt_tokens needs /tokenize")
        try:
            data = json.loads(raw)
            count = data["count"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise ProbeError(f"/tokenize at {url} answered without a count: {text}",
                             hint="is this a vLLM server?") from None
        if not isinstance(count, int) or isinstance(count, bool):
            raise ProbeError(f"/tokenize at {url}: count is not an integer ({count!r})")
        mml = data.get("max_model_len")
        return count, mml if isinstance(mml, int) and not isinstance(mml, bool) else None

    def build(self, client: httpx.Client, url: str, model: str, endpoint: Endpoint,
              target: int) -> SizedPrompt:
        key = (url, model, endpoint, target)
        if key in self._cache:
            return self._cache[key]
        def count(text: str) -> tuple[int, int | None]:
            return self._count(client, url, model, endpoint, text)

        one, mml = count(self.base)
        two, _ = count(self.base + " " + self.base)
        per = max(1, two - one)
        reps = max(1, (target - one) // per + 2)      # a little over the target
        words = " ".join([self.base] * reps).split()
        n, _ = count(" ".join(words))
        while n < target:                               # tokenizers are not quite linear
            words += self.base.split()
            n, _ = count(" ".join(words))
        lo, hi = 1, len(words)                          # largest prefix with count <= target
        best_len, best_n = 0, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            c, _ = count(" ".join(words[:mid]))
            if c <= target:
                best_len, best_n, lo = mid, c, mid + 1
            else:
                hi = mid - 1
        if best_len == 0:
            raise ProbeError(f"no prompt of at most {target} tokens: one word of probe.prompt "
                             "is already longer", hint="raise probe.prompt_tokens")
        if mml is not None and best_n >= mml:
            raise ProbeError(f"a {target}-token prompt does not fit the server's max_model_len "
                             f"{mml}", hint="lower the context or raise --max-model-len")
        sized = SizedPrompt(" ".join(words[:best_len]), best_n, target, mml)
        logger.info("prompt of %d tokens (asked %d) for %s", best_n, target, url)
        self._cache[key] = sized
        return sized


def check_prompt_tokens(sized: SizedPrompt, counted: list[int | None]) -> None:
    """The server must have counted the prompt as /tokenize did (same tokenizer, same
    template); anything else means the probe did not send the prompt it thinks it sent."""
    wrong = sorted({c for c in counted if c is not None and c != sized.tokens})
    if wrong:
        raise ProbeError(f"usage.prompt_tokens {wrong} differs from /tokenize's count "
                         f"{sized.tokens} for the sized prompt",
                         hint="the server tokenizes completions and /tokenize differently")
