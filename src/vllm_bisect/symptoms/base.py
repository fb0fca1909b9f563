"""What a symptom declares (pure values): its direction, how noisy it is, how its samples are
read from a measurement, its threshold judge and what the judge compares with, the spec keys
it needs and reads, and its names in the CLI, the bot, triage, the report and watch.

Each symptom is one module of this package holding one :class:`SymptomInfo`; the registry
(``vllm_bisect.symptoms``: the ``Symptom`` enum, one line per symptom) lists them, and every
rule table, dispatch and list elsewhere derives from it. The spec is passed in untyped
(``Any``): the spec's validator reads this package, so it cannot import the spec back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_bisect.models import FailureKind, Measurement, Verdict


class Direction(Enum):
    """Which way the symptom's number moves when it shows (``sign``: +1 larger is worse)."""

    RISES = 1       # bad is larger (ITL, TTFT)
    FALLS = -1      # bad is smaller (tok/s, speed-up, output length)
    DIFFERS = 0     # no number: shows or not (a wrong output, a crash, start-up memory)

    @property
    def sign(self) -> int:
        return self.value


class Noise(StrEnum):
    """How a commit's measurements of the symptom vary: the likelihood a verdict strategy
    (and auto's choice, ``spec/verdict.py``) assumes."""

    DETERMINISTIC = "deterministic"    # one run per commit tells
    FLAKY = "flaky"                    # shows in some runs only
    SERVER = "server"                  # continuous, one sample per server start
    SERVER_AND_REQUEST = "server + request"   # continuous, per-request samples on a server

    @property
    def continuous(self) -> bool:
        return self in (Noise.SERVER, Noise.SERVER_AND_REQUEST)


@dataclass(frozen=True)
class Judged:
    """One measurement judged against the thresholds of the symptom followed."""

    verdict: Verdict
    reason: str
    length_bad: bool = False
    itl_bad: bool | None = None  # None: no ITL threshold configured


# Bounds of the thresholds (issue 49): beyond them no commit can meet a threshold, or every
# commit does (1e308 ms, 5e-324 ms, a subnormal factor), and `git bisect run` would name a
# commit from a verdict that never looked at the symptom. A microsecond a token is faster
# than any GPU decodes; 1000x is not a regression a bisect over a server's speed
# meaningfully judges. (A symptom's own bounds, e.g. MAX_TTFT_MS, are in its module.)
MIN_MS = 1e-3
MAX_FACTOR = 1000.0
MIN_RATE = 1e-3


@dataclass(frozen=True)
class Key:
    """A ``[verdict]`` key a symptom owns (a threshold): its name, its type, its default, its
    bounds (pydantic's ``gt`` / ``ge`` / ``le``: a value outside is refused when the spec is
    loaded) and its help (what ``vllm-bisect spec --keys`` prints). The spec's ``VerdictSpec``
    has one field per key of every registered symptom (``spec/verdict.py``); ``of()`` reads
    it typed."""

    name: str
    help: str
    type: type[float] = float
    default: float | None = None   # None: unset unless written (the type admits None)
    gt: float | None = None
    ge: float | None = None
    le: float | None = None

    @property
    def annotation(self) -> Any:
        return self.type if self.default is not None else self.type | None

    def of(self, v: Any) -> float | None:
        """Its value in the verdict spec ``v`` (None: unset)."""
        value = getattr(v, self.name)
        return None if value is None else float(value)


@dataclass(frozen=True)
class Words:
    """How triage reads the symptom in a report (regular expressions, read ignoring case:
    ``triage/symptoms.py``, ``triage/symptom_words.py``) and its checkbox on the regression
    issue form (``triage/form/``)."""

    # the form's checkbox, "<answer key>: <what it looks like>" (an answer is read by its key)
    form: str
    # the metric's names: it shows where a sentence names it with a change word, a judgement
    # or two values, in the title, as a table's column or row, or as labelled values
    metric: str = ""
    # words that say it when their sentence has a change word, or in the title ("prefill")
    said: str = ""
    # a sentence that matches this does not say it ("decode is unaffected")
    unless: str = ""
    # words that say it on their own, unless the sentence negates it ("garbled output"), and
    # what they mean (the reading's why: "wrong output")
    alone: str = ""
    means: str = ""
    # it is a time: a sentence that gives a rate (throughput) and no time does not say it
    timed: bool = False


@dataclass(frozen=True)
class Need:
    """Spec keys a symptom needs: any one of ``keys`` set (dotted from the spec's root; a
    table's key is written ``[probe.load]``), or ``ok(spec)`` true; ``text`` overrides what
    the message says is needed; ``threshold_only``: only when the threshold strategy is
    written (the noise-aware tests judge against the good endpoint without it)."""

    keys: tuple[str, ...] = ()
    text: str = ""
    ok: Callable[[Any], bool] | None = None
    threshold_only: bool = False

    def says(self) -> str:
        return self.text or " or ".join(self.keys)

    def met(self, spec: Any) -> bool:
        if self.ok is not None:
            return self.ok(spec)
        return any(_get(spec, k.strip("[]")) is not None for k in self.keys)


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


# (m, reference measurement or None, the verdict spec, the output-token floor) -> Judged
ThresholdJudge = Callable[["Measurement", "Measurement | None", Any, "int | None"], Judged]
Samples = Callable[["Measurement"], list[float]]
# (a probed commit's entry in result.json, the reference's entry, screen) -> present? (None:
# not measurable there): the report's symptom table
Shown = Callable[[dict[str, Any], dict[str, Any] | None, "Screen"], "bool | None"]


def measured(p: dict[str, Any] | None) -> dict[str, Any] | None:
    """A probed entry's measurement (None: none, e.g. the server crashed)."""
    m = (p or {}).get("measurement")
    return m if isinstance(m, dict) else None


@dataclass(frozen=True)
class Screen:
    """What the report's symptom table compares each commit with: the session's verdict spec
    (``verdict``: each symptom reads its own keys), the output-token floor, and the ITL limit
    of the table (the verdict's, or a screen's where the bisect did not judge ITL)."""

    min_tokens: int | None = None
    itl_factor: float | None = None
    max_itl_ms: float | None = None
    verdict: Any = None


@dataclass(frozen=True)
class SymptomInfo:
    """One symptom, declared. ``about`` is its one-line description (CLI help, docs)."""

    key: str
    about: str
    direction: Direction
    noise: Noise
    # the threshold strategy's verdict on one measurement (every symptom has one)
    judge: ThresholdJudge
    # are verdicts relative to the reference endpoint's measurement (given the verdict spec)?
    needs_reference: Callable[[Any], bool] = lambda v: False
    # a failed evaluation (no measurement) that shows the symptom: (its typed failure, its
    # reason, the server log's tail) -> the BAD verdict's reason (None: a skip)
    failed: Callable[[FailureKind | None, str, str], str | None] | None = None
    # a failed start is retried (ops.retries by default; not a crash: a retry would hide it)
    retry: bool = True
    # the probe reads the server's start-up memory (its log and the GPU it holds)
    startup_memory: bool = False
    # the continuous symptoms' samples in one server's measurement (natural scale)
    samples: Samples | None = None
    # the sequential test (SPRT on per-request samples) judges it
    sequential: bool = False
    # the verdict key that is the smallest change that matters (else 1 + min_effect)
    factor_key: str | None = None
    # the ``[verdict]`` keys it owns (its thresholds: name, type, default, bounds, help):
    # the spec's VerdictSpec has a field for each (spec/verdict.py)
    keys: tuple[Key, ...] = ()
    # what the spec needs for this symptom (checked when the spec is loaded)
    needs: tuple[Need, ...] = ()
    # how triage reads it in a report, and its checkbox on the issue form (None: neither)
    words: Words | None = None
    # verdict numbers a request (the bot, from triage) may set for it
    tunable: tuple[str, ...] = ()
    # the probe / verdict values triage writes for it: (dotted key, value, why)
    triage_defaults: tuple[tuple[str, Any, str], ...] = ()
    # expected deterministic, but auto checks that the bad end shows it in every run (a flaky
    # cap looks deterministic at first: verdict.intermittent_runs, bisect/recheck.py)
    may_be_flaky: bool = False
    # auto's reason, where the noise's own does not say it
    auto_why: str = ""
    # a maintainer may name it in the bot's `/bisect symptom=...`
    bot_command: bool = False
    # offer `vllm-bisect explain` (a profile of the culprit) after a run that found it
    speed: bool = False
    # the words of a watched metric's name that this symptom measures (watch)
    metric_words: tuple[str, ...] = ()
    # the per-request series of the report's effect that the verdict is judged on
    effect_series: str = ""
    # the report's symptom table: its column (None: not a column), and its caption
    shown: Shown | None = None
    caption: Callable[[str, Screen], str] | None = None
    column_always: bool = True   # False: a column only where it has a value or is followed
    # a follow-up bisect the report may suggest when the table shows it flipping
    follow_up: bool = False
    # the symptoms whose verdicts it follows too (``any``: length and itl)
    covers: tuple[str, ...] = field(default_factory=tuple)

    @property
    def one_bit(self) -> bool:
        """A server shows it or not, read from its measurement (deterministic or flaky, no
        failure rule, one symptom): the model of the range's rate likelihood
        (``verdict/changepoint_rate.py``)."""
        return (not self.noise.continuous and self.failed is None and not self.startup_memory
                and not self.covers)

    @property
    def per_request(self) -> bool:
        """Do more requests on one server add samples (else one sample per server)?"""
        return self.noise is Noise.SERVER_AND_REQUEST

    def samples_of(self, m: Measurement | None) -> list[float]:
        return [] if m is None or self.samples is None else self.samples(m)

    def smallest_change(self, v: Any) -> float:
        """The smallest change (a factor > 1) that matters."""
        given = getattr(v, self.factor_key) if self.factor_key else None
        return float(given) if given is not None else 1.0 + float(v.min_effect)
