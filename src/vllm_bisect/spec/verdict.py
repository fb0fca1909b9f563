"""The spec's ``[verdict]`` table: what is judged (``Symptom``, the symptoms' registry:
``vllm_bisect.symptoms``), how (``Strategy``), and the keys of each strategy; and the one
table of rules between symptoms and strategies (``AUTO_STRATEGY``, ``JUDGES``,
``NO_FIX_SEARCH``, ``PER_REQUEST``, derived from each symptom's declaration), read by the spec's
defaults and validator (``vllm_bisect.spec``'s ``BisectSpec``) and by the chooser of ``verdict.strategy =
"auto"`` (``verdict/auto.py``, which says why). Re-exported by ``vllm_bisect.spec``.

A symptom's own thresholds (``ttft_factor``, ``max_itl_ms``, ...) are declared in its module
(``SymptomInfo.keys``: name, type, default, bounds, help); ``VerdictSpec`` is this table's
common keys plus one field per declared key, in the registry's order (``symptom_fields()``).
Typed code reads them through their declaration (``itl.FACTOR.of(v)``)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import Field, create_model

from vllm_bisect.spec.build import _Model
from vllm_bisect.symptoms import SCREENED, Noise, Symptom

__all__ = ["AUTO_BY_NOISE", "AUTO_STRATEGY", "JUDGES", "NO_FIX_SEARCH",
           "PER_COMMIT_STRATEGY", "PER_REQUEST", "Strategy", "Symptom", "VerdictSpec",
           "output_token_floor", "runs_with", "symptom_fields", "symptoms_text"]


class Strategy(StrEnum):
    """How commits are judged: one measurement against thresholds, a sequential test on
    per-request samples, or a posterior over the culprit for flaky symptoms."""

    AUTO = "auto"            # chosen from the symptom (see VerdictSpec.strategy)
    THRESHOLD = "threshold"
    SEQUENTIAL = "sequential"
    BAYES = "bayes"
    TWOLEVEL = "twolevel"
    CHANGEPOINT = "changepoint"   # one model of the whole range (verdict/changepoint.py)


# -- the rules between symptoms and strategies (one table, from the symptoms' registry) ------
# the strategy "auto" runs for a symptom of each noise (verdict/auto.py: why): deterministic
# -> one run per commit tells; flaky -> shows in some runs only; continuous -> noisy at two
# levels, the server and the request -> one model of the range from every server (issue 48;
# where it cannot run, PER_COMMIT_STRATEGY says what runs instead)
AUTO_BY_NOISE: Mapping[Noise, Strategy] = {
    Noise.DETERMINISTIC: Strategy.THRESHOLD,
    Noise.FLAKY: Strategy.BAYES,
    Noise.SERVER: Strategy.CHANGEPOINT,
    Noise.SERVER_AND_REQUEST: Strategy.CHANGEPOINT,
}
AUTO_STRATEGY: Mapping[Symptom, Strategy] = {s: AUTO_BY_NOISE[s.info.noise] for s in Symptom}
# the symptoms a strategy can judge, where it cannot judge every one: the sequential test
# needs per-request samples of one metric; the noise-aware tests, a continuous measurement
_CONTINUOUS = tuple(s for s in Symptom if s.info.samples is not None)
JUDGES: Mapping[Strategy, tuple[Symptom, ...]] = {
    Strategy.SEQUENTIAL: tuple(s for s in Symptom if s.info.sequential),
    Strategy.TWOLEVEL: _CONTINUOUS,
    # the model of the range: a continuous measurement, or one bit a server (a cap, a wrong
    # output: verdict/changepoint_rate.py)
    Strategy.CHANGEPOINT: _CONTINUOUS + tuple(s for s in Symptom if s.info.one_bit),
}
# what auto runs where each commit is judged alone (the studies: isolate, deps, knobs judge
# commits the range never held, one at a time) instead of the model of the range, which
# chooses its own; `git bisect run` (git chooses the commits) is answered from the model
# rebuilt from the hook's journal (bisect/search/changepoint_hook.py)
PER_COMMIT_STRATEGY: Mapping[Strategy, Strategy] = {Strategy.CHANGEPOINT: Strategy.TWOLEVEL}
# strategies that do not search for fixes (range.search = "fix"; auto runs threshold instead)
NO_FIX_SEARCH = frozenset({Strategy.BAYES})
# symptoms where more requests on one server add samples (else one sample per server); a
# two-level test of one starts with one request (probe.requests = 1 unless given)
PER_REQUEST = frozenset(s for s in Symptom if s.info.per_request)

# (issue 49: the bounds of the symptoms' own thresholds are declared with them, symptoms/)
MAX_OUTPUT_TOKENS = 1 << 20  # also probe.max_tokens' bound (no model's output is longer)


def tokens_conflict(min_output_tokens: int | None, max_tokens: int | None,
                    send_max_tokens: bool) -> str | None:
    """Why ``verdict.min_output_tokens`` can never be met by a request the probe caps at
    ``probe.max_tokens`` (None: it can)."""
    if min_output_tokens is None or max_tokens is None or not send_max_tokens:
        return None
    if min_output_tokens <= max_tokens:
        return None
    return (f"verdict.min_output_tokens = {min_output_tokens} is above probe.max_tokens = "
            f"{max_tokens}: no request can reach it and every commit would be judged bad; "
            "lower it, or raise probe.max_tokens")


def runs_with(strategy: str, symptom: Symptom) -> Strategy:
    """The strategy that judges ``symptom`` when ``strategy`` is written (auto resolved; the
    same on any number of workers: the model of the range picks k measurements a round,
    bisect/search/changepoint_parallel.py)."""
    if strategy != Strategy.AUTO:
        return Strategy(strategy)
    return AUTO_STRATEGY[symptom]


def symptoms_text(symptoms: tuple[Symptom, ...]) -> str:
    """``"itl", "ttft" or "throughput"`` (for messages)."""
    quoted = [f'"{s.value}"' for s in symptoms]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


class _VerdictCommon(_Model):
    """The ``[verdict]`` keys no one symptom owns (``VerdictSpec`` adds the symptoms' own).
    ``min_output_tokens`` is the output-token floor, the probe's and every judge's
    (``output_token_floor()``), not the length symptom's alone: it is kept here."""

    symptom: Symptom = Symptom.ANY
    # several symptoms, one first-bad commit each, from the same measurements (bisect.multi;
    # empty: `symptom` alone). `symptom` becomes the first.
    symptoms: list[Symptom] = Field(default_factory=list)
    # after a culprit of itl / throughput / mtp-speedup: test the bad end against it with the
    # same noise-aware test and, when still clearly worse, bisect the rest (bisect.multi)
    rest_check: bool = True
    # the rest check's fresh server starts at most, per check (the bad end against the
    # culprit, its parent against the good end): it starts from the servers the search and
    # the verification ran of both commits, says "explained" when even the 95% upper bound
    # of the rest is under the smallest change that matters, bisects the rest when clearly
    # worse, and says "undecided" after this many more (bisect/rest.py)
    rest_servers: int = Field(default=8, ge=0, le=100)
    # two-level: a commit off the good end by the factor is BAD (a plateau between two steps;
    # at the final pair's bound it asks for the fall-back first: verdict/twolevel.py)
    plateau: bool = True
    # (bounds: a threshold no commit can meet, or every commit meets, is refused at load;
    # MAX_OUTPUT_TOKENS is the probe's own cap on max_tokens)
    min_output_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    # "sequential": calibrate both endpoints with calibration_samples requests each, then
    # judge each commit by a sequential probability ratio test on per-request ITL, sampling
    # more on the same server until it decides (max_samples: undecided -> skip); alpha bounds
    # the chance of any mislabel over the whole bisect. Needs symptom = "itl".
    # "bayes": for flaky symptoms (a crash, a cap in some runs only): run both endpoints
    # calibration_runs times to learn how often the symptom shows, keep a posterior over the
    # culprit, run the commit with the largest expected information gain (again if need be),
    # stop when one commit holds `confidence` of it (or after max_runs)
    # "twolevel": the two-level sequential test (a server level plus per-request noise):
    # at least two servers per endpoint, then per commit more requests or a fresh server,
    # whichever reduces the doubt more per cost, until the evidence is clear; itl_factor /
    # throughput_factor (else 1 + min_effect) is the smallest change that matters.
    # "changepoint": one model of the whole range: a posterior over the first bad commit
    # from every server measured (endpoints included), the next server where the model is
    # in doubt, stop when one commit holds `confidence`; the rest checks are the same model
    # on each side of the culprit (verdict/changepoint.py); a cap or a wrong output is one
    # bit a server, shown always or with a rate (verdict/changepoint_rate.py); the hook
    # answers HEAD from the same model rebuilt from its journal
    # "auto" (the default): length, correctness -> threshold; crash -> bayes; itl, ttft,
    # throughput, mtp-speedup -> changepoint (with parallel.workers > 1 and in the studies:
    # twolevel); any -> threshold
    strategy: Strategy = Strategy.AUTO
    # twolevel: a server start costs this many probe requests (picks requests vs servers);
    # changepoint: the same, until it has measured three starts and requests in this run
    server_cost: float = Field(default=3.0, gt=0.0, le=1000.0)
    max_servers: int = Field(default=12, ge=1, le=100)
    confidence: float = Field(default=0.99, gt=0.5, lt=1.0)
    calibration_runs: int = Field(default=4, ge=1, le=100)
    # auto, length / correctness: the bad endpoint runs up to this many times (fresh servers)
    # until it shows the symptom (`run`: missed first, then shown -> bayes; the hook: until
    # shown and missed, some runs only -> refused) (1: no repeats and no re-checks, for a
    # symptom known to be deterministic)
    intermittent_runs: int = Field(default=8, ge=1, le=100)
    # auto, length / correctness under `run`: after the threshold search the culprit's
    # parent runs this many more times (a flaky symptom looks good); shown in any -> bayes.
    # 2 keeps a deterministic cap at plain bisect's + 3 server starts (the good endpoint lazy:
    # bisect/recheck.py); raise it for a symptom suspected flaky (docs/benchmarks.md prices)
    recheck_runs: int = Field(default=2, ge=0, le=100)
    max_runs: int = Field(default=200, ge=1, le=10000)
    calibration_samples: int = Field(default=5, ge=5, le=400)
    max_samples: int = Field(default=40, ge=3, le=1000)
    alpha: float = Field(default=0.01, gt=0.0, lt=0.5)
    min_effect: float = Field(default=0.05, ge=0.0)
    # once the culprit is found, re-measure it and its parent on fresh servers with this many
    # requests each (the two-level test adds servers while it asks), unless the search's own
    # runs already verify the pair: a deterministic cap's re-checks, or (rest_check = false)
    # the two-level confirmation at the whole-bisect bound; changepoint verifies nothing
    # again. The report's effect and its 95% interval come from the samples the verification
    # rests on, with their requests and servers (0: no verification; from the search's)
    verify_samples: int = Field(default=10, ge=0, le=1000)


def symptom_fields() -> dict[str, Any]:
    """The fields of the symptoms' own keys (``SymptomInfo.keys``), in the registry's order
    (the screened ones' last): name -> (type, pydantic Field with the key's default, bounds
    and help)."""
    out: dict[str, Any] = {}
    for info in (*(s.info for s in Symptom), *SCREENED):
        for k in info.keys:
            if k.name in out or k.name in _VerdictCommon.model_fields:
                raise TypeError(f"verdict.{k.name} is declared twice (symptom {info.key})")
            out[k.name] = (k.annotation, Field(default=k.default, description=k.help,
                                               gt=k.gt, ge=k.ge, le=k.le))
    return out


if TYPE_CHECKING:
    # (what mypy sees: the common keys; a symptom's own are read through its Key, .of(v))
    VerdictSpec = _VerdictCommon
else:
    VerdictSpec = create_model("VerdictSpec", __base__=_VerdictCommon, __module__=__name__,
                               __doc__="The spec's [verdict] table.", **symptom_fields())


def output_token_floor(given: int | None, max_tokens: int | None,
                       send_max_tokens: bool = True) -> int | None:
    """The one output-token floor: the fewest output tokens a request should return, ``given``
    if set, else the ``max_tokens`` the probe sends (None: no floor). The verdict's length
    floor (``verdict.min_output_tokens``), the probe's own (``probe.min_tokens``) and the
    ``min_tokens`` a request asks the server for all come from here."""
    if given is not None:
        return given
    return max_tokens if send_max_tokens else None
