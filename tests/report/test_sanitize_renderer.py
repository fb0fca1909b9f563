"""The Markdown neutraliser against a CommonMark renderer (markdown-it-py): whatever the
hostile text, the rendered comment holds no live mention (outside code) and no image. The
issue's two ways through (backslash-escaped backticks in a commit subject; a server error
body with its own code fence) and their relatives."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from vllm_bisect.report.sanitize import neutralise

# GitHub's mention rule (html-pipeline's MentionFilter): after a non-word character, outside
# code, pre and links
MENTION = re.compile(r"(?<!\w)@[A-Za-z0-9][A-Za-z0-9-]*(?:/[A-Za-z0-9_.-]+)?")


class _Live(HTMLParser):
    """Text outside <code>/<pre>/<a>, and every <img>."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.text: list[str] = []
        self.images = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("code", "pre", "a"):
            self.depth += 1
        if tag == "img":
            self.images += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("code", "pre", "a"):
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth == 0:
            self.text.append(data)


def live(markdown: str) -> tuple[list[str], int]:
    """The mentions GitHub would ping and the images it would load in ``markdown``."""
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    p = _Live()
    p.feed(md.render(markdown))
    return MENTION.findall("".join(p.text)), p.images


HOSTILE = [
    # the issue: backslash-escaped backticks in a commit subject
    r"[Core] fix \`@vllm-project/maintainers\` and \`![x](https://evil.invalid/a.png)\`",
    # the issue: a server error body holding its own code fence
    "skip: HTTP 500: ```\n@vllm-project/maintainers ![x](https://evil.invalid/b.png)\n```",
    "log tail:\n```\nerror\n```\n@org/team ![y](https://evil.invalid/c.png)\n```\nmore\n```",
    # a backtick in the info string: not a fence for CommonMark
    "```x`\n@org/team ![z](https://evil.invalid/d.png)\n```",
    # a longer opening fence closed early by the text's own shorter fence
    "````\n```\n````\n@org/team\n",
    # raw HTML blocks: their content is not Markdown, a code span would be literal
    "<div>\n@org/team <img src=https://evil.invalid/e.png>\n</div>",
    "<details><summary>@org/team</summary>\n\n</details>",
    # double backslashes, code spans of two backticks, an unclosed backtick run
    r"\\`@org/team\\` ``@a`b`` ``` @c/d ` @e",
    "a | b\n---|---\n`x | @org/team | ![q](https://evil.invalid/f.png)",
    "[link](https://evil.invalid) @org/team <https://evil.invalid/@org/team>",
    "x`@org/team and more",
    "* item\n  ```\n  @in/code\n  ```\n@org/team",
    "> ```\n> @quoted\n@org/team",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_no_live_mention_or_image_after_neutralising(text: str) -> None:
    mentions, images = live(neutralise(text))
    assert mentions == [] and images == 0, (neutralise(text), mentions, images)


def test_the_cases_are_live_before() -> None:
    """Each case renders a live mention or image as written (the test would catch a miss)."""
    for text in HOSTILE:
        mentions, images = live(text)
        assert mentions or images, text


@pytest.mark.parametrize("text", HOSTILE)
def test_idempotent(text: str) -> None:
    once = neutralise(text)
    assert neutralise(once) == once


def test_kept_mention_stays_live_and_code_is_kept() -> None:
    text = "thanks @alice; cc @org/team\n```\n@inside ![a](b)\n```\n`@span`"
    out = neutralise(text, keep_mentions=["alice"])
    mentions, images = live(out)
    assert mentions == ["@alice"] and images == 0
    assert "```\n@inside ![a](b)\n```" in out and "`@span`" in out


PIECES = ["`", "``", "```", "\\", "\\`", "@org/team", "@a", "![x](https://evil.invalid/i.png)",
          "<img src=https://evil.invalid/j.png>", "<div>", "<details>", "</summary>", "\n",
          "\n\n", "|", "> ", "* ", "    ", "~~~", "[l](u)", " ", "x", "<https://h/@b/c>", "&lt;"]


def test_random_hostile_text_never_renders_live() -> None:
    """2000 seeded strings of the pieces Markdown turns on: none renders a mention or an
    image after neutralising, and neutralising twice changes nothing."""
    import random

    rng = random.Random(41)
    for _ in range(2000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 14)))
        out = neutralise(text)
        mentions, images = live(out)
        assert mentions == [] and images == 0, (text, out)
        assert neutralise(out) == out, text
