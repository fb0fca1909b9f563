"""How a report spells versions and where its title is: read before any rule runs.

Rules written for one split kept failing on the next because the same release was spelled
another way (round 5's miss classification, docs/triage.md). These are spelling rules, not
role rules: they rewrite a short or glued form into the full version the project's own
version scheme says it is, and say so in the ``read`` provenance.

- **A project's version scheme.** vLLM, vllm-ascend, SGLang and Ollama release only 0.N.M
  versions, so a short form with a non-zero first part names 0.N.M: ``vllm11`` is 0.11,
  ``vllm-ascend 18.0rc1`` is 0.18.0rc1, ``Ollama 12.7`` is 0.12.7, ``13rc1版本`` is 0.13.0rc1.
  A short form counts only beside the product's name, glued to it, with an rc suffix, or
  before a release word (版本, release, version), and only in a report that names one of
  these products; never after another package's name (``CANN 8.5 版本``, ``torch 2.9``).
  ``vLLM V1`` (the engine) is no version: a ``v`` prefix is never shifted.
- **Glued product names.** ``vllm-ascend0.10.2rc1``, ``sglang0.5.9``: the name and the
  version are two words.
- **The title** is the first line that is not the report's provenance (a line that is only a
  URL, or "Trimmed from <url>" / "Source: <url>" above the issue's title).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_bisect.triage.refs import OTHER_PACKAGE, URL

ZERO_MAJOR = r"vllm-ascend|vllm|sglang|ollama"
PRODUCT_NAMED = re.compile(rf"(?<![A-Za-z])(?:{ZERO_MAJOR})", re.IGNORECASE)
# a short form: N or N.M (N has no leading 0: 0.11 is already full), with an optional rc
NM = r"(?P<n>[1-9]\d?)(?:\.(?P<m>\d{1,2}))?"
SHORT = NM + r"(?P<pre>\s?rc\d{1,2})?"
# "vllm11", "vllm-ascend0.10.2rc1", "sglang0.5.9": the product glued to a version
GLUED = re.compile(rf"(?<![A-Za-z0-9_.])(?P<prod>{ZERO_MAJOR})(?P<sep>[-_]?)(?=\d)(?!0\d\d)"
                   r"(?!\d(?![\d.]))", re.IGNORECASE)
# "vllm11", "vllm13rc1": a short form glued to the product's name
GLUED_SHORT = re.compile(rf"(?<![A-Za-z0-9_.])(?P<prod>{ZERO_MAJOR})[-_]?{NM}"
                         r"(?P<pre>rc\d{1,2})?(?![A-Za-z0-9_.+-])", re.IGNORECASE)
# "Ollama 12.7", "vllm-ascend 18.0rc1", "vllm 11": a short form right after the product's name
AFTER_PRODUCT = re.compile(rf"(?<![A-Za-z0-9_.])(?P<prod>{ZERO_MAJOR})\s{{1,2}}{SHORT}(?![A-Za-z0-9_.+-])",
                           re.IGNORECASE)
# "13rc1版本", "18.0rc1", "11版本", "7.2 release": a short form with an rc or a release word
WITH_RC = re.compile(r"(?<![A-Za-z0-9_.+-])" + NM + r"(?P<pre>rc\d{1,2})(?![A-Za-z0-9_.+-])",
                     re.IGNORECASE)
WITH_WORD = re.compile(r"(?<![A-Za-z0-9_.+-])" + NM + r"(?=\s{0,2}版本|\s{1,2}(?:release|version)\b)",
                       re.IGNORECASE)
# "vLLM 0.13.0 rc1": an rc after a space is the same pre-release
SPACED_RC = re.compile(r"(?<![A-Za-z0-9_.])(v?\d{1,3}\.\d{1,4}(?:\.\d{1,4})?)\s(rc\d{1,2})(?![\w.])",
                       re.IGNORECASE)
PROVENANCE = re.compile(r"^\s{0,3}(?:(?:trimmed|taken|copied|excerpted|adapted|quoted|source|"
                        r"from|originally\s{1,3}(?:posted|from)|url)\b[^\n]{0,40})?"
                        r"<?https?://\S{1,2000}>?\s{0,3}$", re.IGNORECASE)


@dataclass(frozen=True)
class Respelled:
    """One rewrite: the line, the text as written, the text read, and why."""

    line: int
    written: str
    read: str
    why: str


def title_index(lines: list[str]) -> int:
    """The 1-based line of the title: the first non-empty line that is not provenance."""
    first = 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        first = first or n
        if not PROVENANCE.match(line):
            return n
    return first or 1


def _full(m: re.Match[str]) -> str:
    pre = (m.groupdict().get("pre") or "").strip().lower()
    minor = m.group("m")
    return f"0.{m.group('n')}" + (f".{minor}" if minor is not None else (".0" if pre else "")) + pre


def _other_package(line: str, start: int) -> bool:
    return bool(OTHER_PACKAGE.search(line[max(0, start - 40):start]))


def _respell_line(n: int, line: str, done: list[Respelled]) -> str:
    """The line respelled outside its URLs (a wheel's file name in a URL is as built)."""
    out, at = [], 0
    for m in URL.finditer(line):
        out += [_respell_text(n, line[at:m.start()], done), m.group(0)]
        at = m.end()
    return "".join(out) + _respell_text(n, line[at:], done)


def _respell_text(n: int, line: str, done: list[Respelled]) -> str:
    def glued(m: re.Match[str]) -> str:
        if m.group("m") is None and not m.group("pre") and len(m.group("n")) < 2:
            return m.group(0)  # "vllm1": V1 (the engine), not a version
        full = m.group("prod") + " " + _full(m)
        done.append(Respelled(n, m.group(0), full, "a short form glued to the product's name; "
                              "the project's releases are all 0.N.M"))
        return full

    before = len(done)
    new = SPACED_RC.sub(lambda m: m.group(1) + m.group(2).lower(), GLUED.sub(
        lambda m: m.group("prod") + " ", GLUED_SHORT.sub(glued, line)))
    if new != line and len(done) == before:
        done.append(Respelled(n, line.strip()[:60], new.strip()[:60],
                              "a product name glued to its version, or an rc after a space: "
                              "one version, written as PEP 440 spells it"))
    line = new

    def short(m: re.Match[str], why: str) -> str:
        text, groups = m.group(0), m.groupdict()
        if "prod" in groups and groups.get("m") is None and not groups.get("pre"):
            return text  # "vllm 2 GPUs": a bare count after the name is no version
        if "prod" not in groups and (_other_package(m.string, m.start()) or re.match(
                r"\s{0,2}(?:release|version)\s{1,3}(?:of|for)\b", m.string[m.end():], re.I)):
            return text  # "CANN 8.5 版本", "torch 2.9 release", "the 3.2 release of X"
        if "prod" not in groups and groups.get("m") is None and not groups.get("pre") and \
                not re.match(r"\d{1,2}\s{0,2}版本", m.string[m.start():]):
            return text  # a bare number before "release" is a count, not a version
        head = (m.group("prod") + " ") if "prod" in groups else ""
        done.append(Respelled(n, text, head + _full(m), why))
        return head + _full(m)

    line = AFTER_PRODUCT.sub(lambda m: short(
        m, "the project's releases are all 0.N.M: a short form after its name is 0.N.M"), line)
    line = WITH_RC.sub(lambda m: short(
        m, "an rc of a project whose releases are all 0.N.M: 0.N.MrcK"), line)
    return WITH_WORD.sub(lambda m: short(
        m, "a short form before a release word, in a report about a project whose releases "
           "are all 0.N.M"), line)


FAMILY = re.compile(r"(?<![A-Za-z0-9_.])(?P<fam>0\.\d{1,2})(?![A-Za-z0-9_.+-])")
FULL = re.compile(r"(?<![A-Za-z0-9_.])v?(0\.\d{1,2}\.\d{1,2}(?:rc\d{1,2}|\.post\d{1,2})?)(?![A-Za-z0-9_.+-])",
                  re.IGNORECASE)


def respell(lines: list[str]) -> tuple[list[str], list[Respelled]]:
    """The lines with short and glued versions written out in full, and what was rewritten.
    A family written short ("vllm13" -> 0.13) stands for the one full version of that family
    the report names ("13rc1版本" -> 0.13.0rc1): one release, not two."""
    if not any(PRODUCT_NAMED.search(line) for line in lines):
        return lines, []
    done: list[Respelled] = []
    out = [_respell_line(n, line, done) for n, line in enumerate(lines, 1)]
    fulls = {m.group(1).lower() for line in out for m in FULL.finditer(line)}
    shorts = {r.read.split()[-1] for r in done if FAMILY.fullmatch(r.read.split()[-1])}
    for fam in shorts:
        named = {f for f in fulls if f.startswith(fam + ".")}
        if len(named) != 1:
            continue
        full = named.pop()
        for n, line in enumerate(out):
            new = re.sub(rf"(?<![A-Za-z0-9_.]){re.escape(fam)}(?![A-Za-z0-9_.+-])", full, line)
            if new != line:
                done.append(Respelled(n + 1, fam, full, f"{fam} written short: the one release of "
                                      f"that family the report names ({full})"))
                out[n] = new
    return out, done
