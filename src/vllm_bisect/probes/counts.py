"""Do a stream's own token counts agree? A stream that contradicts itself is a probe error.

One streamed request counts its output three ways: the chunks that carry text (each one
needs at least one new token), the running ``usage.completion_tokens`` that
``continuous_usage_stats`` puts on each chunk (cumulative), and the final usage chunk's
total. A server whose counts disagree cannot be believed about the length: judged, a final
count below the text it streamed reads as a short output (a cap that is not there), and a
count inflated to ``max_tokens`` over a handful of chunks hides a real cap. Such a stream
is a :class:`StreamFormatError` that names the two numbers (the commit is skipped, never
judged short or long).

Tolerance, stated: the counts compared may differ by ``COUNT_SLACK`` = 1 token (a last chunk
may flush text held back for a stop string without a new token). Beyond it:

- the final count below the number of text-carrying chunks;
- the final count below a running count the stream reported earlier;
- the final count above the running count on the stream's last choice chunk (the finish
  chunk carries the whole count in vLLM);
- without running counts, more than ``MAX_TOKENS_PER_CHUNK`` = 32 tokens per choice chunk
  (speculative decoding puts at most ``num_speculative_tokens + 1`` tokens in one engine
  step; a vLLM that merges steps into one chunk also reports running counts);
- a final count of 0 although a choice was streamed (a server that streams a choice has
  generated at least one token).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_bisect.errors import StreamFormatError

COUNT_SLACK = 1
MAX_TOKENS_PER_CHUNK = 32
_HINT = ("the server's token counts contradict each other, so its output length cannot be "
         "judged; is it vLLM-compatible?")


@dataclass
class StreamCounts:
    """What one stream said about its length, gathered while it is read."""

    text_chunks: int = 0             # chunks that carried output text
    choice_chunks: int = 0           # chunks that carried a choice (text or not)
    running_max: int | None = None   # the highest running count reported
    running_last: int | None = None  # the running count on the last choice chunk

    def on_choice(self, running: int | None) -> None:
        self.choice_chunks += 1
        self.running_last = running
        if running is not None:
            self.running_max = max(running, self.running_max or 0)


def check_counts(url: str, final: int | None, c: StreamCounts) -> None:
    """Raise :class:`StreamFormatError` when ``final`` (the final usage chunk's
    ``completion_tokens``; None: none was sent) contradicts the stream's other counts."""
    if final is None:
        return
    why: str | None = None
    if final == 0 and c.choice_chunks:
        why = (f"usage.completion_tokens is 0 after {c.choice_chunks} choice chunk(s): a "
               "server that streams a choice has generated at least one token")
    elif final + COUNT_SLACK < c.text_chunks:
        why = (f"usage.completion_tokens {final} is below the {c.text_chunks} chunks that "
               "carried text (each carries at least one token)")
    elif c.running_max is not None and final + COUNT_SLACK < c.running_max:
        why = (f"final usage.completion_tokens {final} is below the running count "
               f"{c.running_max} the stream reported earlier")
    elif c.running_last is not None and final > c.running_last + COUNT_SLACK:
        why = (f"final usage.completion_tokens {final} is above the running count "
               f"{c.running_last} on the stream's last chunk")
    elif c.running_last is None and final > c.choice_chunks * MAX_TOKENS_PER_CHUNK:
        why = (f"usage.completion_tokens {final} over {c.choice_chunks} chunk(s) is more than "
               f"{MAX_TOKENS_PER_CHUNK} tokens a chunk, with no running counts to back it")
    if why:
        raise StreamFormatError(f"stream from {url}: {why}", hint=_HINT)
