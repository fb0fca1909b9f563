"""The registry of symptoms: one module per symptom declares what it is (``base.SymptomInfo``:
its direction, its noise, its samples, its threshold judge and reference, the spec keys it
needs, its names in the CLI, the bot, triage, the report and watch), and one line here
registers it. ``Symptom`` is the registry: each member is a symptom a bisect can follow
(``verdict.symptom``), its value the key, ``Symptom.X.info`` its declaration. Every rule table
(``spec/verdict.py``), the judge's dispatch, ``samples_of``, the spec's validator and every
list of symptoms elsewhere derive from it (``tests/symptoms/test_registry.py`` fails on a
hand-kept list). ``SCREENED`` are symptoms the report's table reads but no bisect follows.

Adding a symptom: a module here with its ``SymptomInfo``, and one line in ``Symptom``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Self

from vllm_bisect.symptoms import (
    acceptance,
    any_of,
    correctness,
    crash,
    itl,
    length,
    memory,
    mtp_speedup,
    throughput,
    ttft,
)
from vllm_bisect.symptoms.base import (
    Direction,
    Judged,
    Need,
    Noise,
    Screen,
    SymptomInfo,
)

__all__ = ["SCREENED", "TABLE", "Direction", "Judged", "Need", "Noise", "Screen", "Symptom",
           "SymptomInfo", "by_key", "keys_text"]


class Symptom(StrEnum):
    """A symptom a bisect follows: ``Symptom("ttft")``, ``Symptom.TTFT.info``."""

    _value_: str
    info: SymptomInfo

    def __new__(cls, info: SymptomInfo | str) -> Self:
        # (members are made from their declarations; Symptom("ttft") looks one up by key)
        if not isinstance(info, SymptomInfo):
            raise TypeError(f"a symptom is declared by its SymptomInfo, not {info!r}")
        member = str.__new__(cls, info.key)
        member._value_ = info.key
        member.info = info
        return member

    # the registry: one line per symptom. Its order is the order of preference where a
    # report shows several (triage follows the first), and of help texts and tables
    LENGTH = length.LENGTH
    ITL = itl.ITL
    TTFT = ttft.TTFT
    THROUGHPUT = throughput.THROUGHPUT
    CORRECTNESS = correctness.CORRECTNESS
    MEMORY = memory.MEMORY
    MTP_SPEEDUP = mtp_speedup.MTP_SPEEDUP
    CRASH = crash.CRASH
    ANY = any_of.ANY


# read in the report's symptom table, never followed by a bisect
SCREENED: tuple[SymptomInfo, ...] = (acceptance.ACCEPTANCE,)

# the report's symptom table: its columns, in the registry's order, the screens last
TABLE: tuple[SymptomInfo, ...] = tuple(
    i for i in (*(s.info for s in Symptom), *SCREENED) if i.shown is not None)


def by_key(key: str) -> SymptomInfo | None:
    """The declaration of a symptom by its key (a screened one too); None: no such symptom."""
    if key in Symptom._value2member_map_:
        return Symptom(key).info
    return next((i for i in SCREENED if i.key == key), None)


def keys_text(symptoms: Iterable[Symptom] | None = None, sep: str = "|") -> str:
    """The keys of ``symptoms`` (default: every followable one), joined: ``length|itl|...``."""
    return sep.join(str(s) for s in (Symptom if symptoms is None else symptoms))
