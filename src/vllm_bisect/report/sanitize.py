"""Markdown that pings nobody and loads nothing: the one filter for what the bot posts and
for report.md.

Text from servers and commit subjects lands in issue comments. GitHub would turn an
``@org/team`` in it into a notification and an image (``![x](https://...)``, ``<img src>``)
into a request to a foreign host. Where code is, is decided as a CommonMark renderer decides
it (markdown-it-py's block parse; code spans by CommonMark's rule, so a backslash-escaped
backtick opens none): outside code, a mention becomes a code span (``@`` and a zero-width
space in a raw HTML block, where a code span would be literal), an image's ``![`` is escaped
(the text stays, as a link at most) and every HTML tag but the few the reports use is
escaped. The result is rendered and checked; what would still ping or load falls back to
stricter rules (:func:`neutralise`). Idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum
from html.parser import HTMLParser

from markdown_it import MarkdownIt

from vllm_bisect.errors import printable

MENTION = re.compile(r"(?<!\w)@(?P<who>[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
                     r"(?:/[A-Za-z0-9_.-]{1,100})?)")
IMAGE = re.compile(r"!\[")
TAG = re.compile(r"<(?!/?(?:details|summary|br|b|i|em|strong|code|kbd|sub|sup)\b[^<>]*>)"
                 r"(?=[A-Za-z/!?])")
PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
ZWSP = "\u200b"   # after "@": not a mention for GitHub, looks the same, works in raw HTML


class _Kind(Enum):
    TEXT = "text"    # Markdown: inline code spans are code
    CODE = "code"    # a fenced or indented code block: left as it is
    HTML = "html"    # a raw HTML block: no Markdown inside (a code span would be literal)


def _renderer() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def _blocks(text: str) -> tuple[list[_Kind], list[tuple[int, int, bool]]]:
    """Each line's block kind as a CommonMark renderer sees it, and the line ranges of the
    inline runs (paragraphs, headings, table rows: ``True``) whose code spans may span
    lines."""
    kinds = [_Kind.TEXT] * (text.count("\n") + 1)
    runs: dict[tuple[int, int], bool] = {}
    table = False
    for tok in _renderer().parse(text):
        table = {"table_open": True, "table_close": False}.get(tok.type, table)
        if tok.map is None:
            continue
        a, b = tok.map
        if tok.type in ("fence", "code_block", "html_block"):
            for i in range(a, min(b, len(kinds))):
                kinds[i] = _Kind.CODE if tok.type != "html_block" else _Kind.HTML
        elif tok.type == "inline":
            runs[(a, b)] = table
    return kinds, [(a, b, t) for (a, b), t in sorted(runs.items())]


def _mention(m: re.Match[str], keep: frozenset[str], code: bool) -> str:
    if m.group("who") in keep:
        return m.group(0)
    return f"`{m.group(0)}`" if code else "@" + ZWSP + m.group(0)[1:]


def _plain(text: str, keep: frozenset[str], spans: bool = True) -> str:
    """Markdown text outside code: a mention becomes a code span (``spans``; else, where a
    stray backtick of the run could pair with the span's, ``@`` + a zero-width space),
    ``![`` is escaped, tags too."""
    text = MENTION.sub(lambda m: _mention(m, keep, spans), text)
    text = IMAGE.sub(r"!\\[", text)
    return TAG.sub("&lt;", text)


def _raw_html(line: str, keep: frozenset[str]) -> str:
    line = MENTION.sub(lambda m: _mention(m, keep, False), line)
    return TAG.sub("&lt;", IMAGE.sub(r"!\\[", line))


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Where CommonMark finds code spans in ``text``: a backtick run closed by the next run of
    the same length; a backslash-escaped backtick opens none."""
    spans, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in PUNCT:
            i += 2
            continue
        if c != "`":
            i += 1
            continue
        j = i
        while j < n and text[j] == "`":
            j += 1
        k = j
        while k < n:
            if text[k] != "`":
                k += 1
                continue
            m = k
            while m < n and text[m] == "`":
                m += 1
            if m - k == j - i:
                spans.append((i, m))
                break
            k = m
        i = spans[-1][1] if spans and spans[-1][0] == i else j
    return spans


def _inline(text: str, keep: frozenset[str], table: bool) -> str:
    """A run of Markdown text (a paragraph's lines, a table row's cells) neutralised outside
    its code spans."""
    if table:  # cells split first (GFM), then each cell's code spans
        cells = re.split(r"(?<!\\)(\|)", text)
        return "".join(c if c == "|" else _inline(c, keep, False) for c in cells)
    spans = _code_spans(text)
    outside = [(a, b) for a, b in zip([0, *(e for _, e in spans)],
                                      [*(b for b, _ in spans), len(text)], strict=True)]
    wrap = not any("`" in text[a:b] for a, b in outside)  # a stray backtick would pair
    out = []
    for (a, b), span in zip(outside, [*spans, None], strict=True):
        out.append(_plain(text[a:b], keep, wrap))
        if span is not None:
            out.append(text[span[0]:span[1]])
    return "".join(out)


def _neutral(text: str, keep: frozenset[str]) -> str:
    lines = text.split("\n")
    kinds, runs = _blocks(text)
    done = [False] * len(lines)
    for a, b, table in runs:
        if all(kinds[i] is _Kind.TEXT and not done[i] for i in range(a, b)):
            lines[a:b] = _inline("\n".join(lines[a:b]), keep, table).split("\n")
            done[a:b] = [True] * (b - a)
    for i, line in enumerate(lines):
        if not done[i] and kinds[i] is not _Kind.CODE:
            lines[i] = (_raw_html(line, keep) if kinds[i] is _Kind.HTML
                        else _inline(line, keep, False))
    return "\n".join(lines)


class _Live(HTMLParser):
    """What GitHub would act on in rendered HTML: mentions in text outside code, pre and
    links; images."""

    def __init__(self, keep: frozenset[str]) -> None:
        super().__init__()
        self.keep, self.depth, self.found = keep, 0, False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.depth += tag in ("code", "pre", "a")
        self.found |= tag == "img"

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag in ("code", "pre", "a")

    def handle_data(self, data: str) -> None:
        if self.depth <= 0:
            self.found |= any(m.group("who") not in self.keep
                              for m in re.finditer(r"(?<!\w)@(?P<who>[A-Za-z0-9][\w/.-]*)",
                                                   data))


def live(markdown: str, keep: frozenset[str] = frozenset()) -> bool:
    """Does ``markdown``, rendered by a CommonMark renderer, ping anyone (but ``keep``) or
    load an image?"""
    p = _Live(keep)
    p.feed(_renderer().render(markdown))
    p.close()
    return p.found


def neutralise(markdown: str, keep_mentions: Iterable[str] = ()) -> str:
    """``markdown`` with mentions (except of ``keep_mentions``), remote images and HTML
    neutralised outside code; code spans and blocks are left as they are. The result is
    rendered (markdown-it-py, CommonMark) and checked: where something would still ping or
    load, every mention outside code blocks gets the zero-width space, and if even that
    leaves something live, the whole text goes into a fence longer than any backtick run
    in it. Idempotent."""
    keep = frozenset(keep_mentions)
    text = printable(markdown)
    out = _neutral(text, keep)
    if not live(out, keep):
        return out
    kinds, _ = _blocks(text)
    strict = "\n".join(line if k is _Kind.CODE else _raw_html(line, keep)
                        for line, k in zip(text.split("\n"), kinds, strict=False))
    if not live(strict, keep):
        return strict
    fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
    return f"{fence}text\n{text}\n{fence}"
