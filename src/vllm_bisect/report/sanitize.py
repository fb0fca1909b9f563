"""Markdown that pings nobody and loads nothing: the one filter for what the bot posts and
for report.md.

Text from servers and commit subjects lands in issue comments. GitHub would turn an
``@org/team`` in it into a notification and an image (``![x](https://...)``, ``<img src>``)
into a request to a foreign host. Outside code spans and fenced blocks (where GitHub renders
neither), a mention becomes a code span, an image's ``![`` is escaped (the text stays, as a
link at most) and every HTML tag but the few the reports use is escaped. Idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from vllm_bisect.errors import printable

MENTION = re.compile(r"(?<![\w`@/.-])@(?P<who>[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
                     r"(?:/[A-Za-z0-9_.-]{1,100})?)")
IMAGE = re.compile(r"!\[")
TAG = re.compile(r"<(?!/?(?:details|summary|br|b|i|em|strong|code|kbd|sub|sup)\b[^<>]*>)"
                 r"(?=[A-Za-z/!?])")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")


def _plain(text: str, keep: frozenset[str]) -> str:
    def mention(m: re.Match[str]) -> str:
        return m.group(0) if m.group("who") in keep else f"`{m.group(0)}`"

    text = MENTION.sub(mention, text)
    text = IMAGE.sub(r"!\\[", text)
    return TAG.sub("&lt;", text)


def _line(line: str, keep: frozenset[str]) -> str:
    out, last = [], 0
    for m in CODE_SPAN.finditer(line):
        out += [_plain(line[last:m.start()], keep), m.group(0)]
        last = m.end()
    out.append(_plain(line[last:], keep))
    return "".join(out)


def neutralise(markdown: str, keep_mentions: Iterable[str] = ()) -> str:
    """``markdown`` with mentions (except of ``keep_mentions``), remote images and HTML
    neutralised outside code; code spans and fenced blocks are left as they are."""
    keep = frozenset(keep_mentions)
    lines, fence = [], None
    for line in printable(markdown).split("\n"):  # (no terminal control, in code or not)
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1) == fence:
                fence = None
            lines.append(line)
        elif m:
            fence = m.group(1)
            lines.append(line)
        else:
            lines.append(_line(line, keep))
    return "\n".join(lines)
