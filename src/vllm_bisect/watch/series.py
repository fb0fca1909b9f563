"""A series of benchmark results, each with its commit (or version / nightly tag) and time.

Read from:

- a directory of ``vllm bench serve --save-result`` JSON files (the commit from a
  ``--metadata commit=<sha>`` key, a ``version`` such as ``0.23.1rc1.dev471+ge312c5cb2``, or
  a sha in the file name; the time from its ``date``),
- a CSV or JSON-lines export (a ``commit`` / ``version`` / ``tag`` column, an optional
  ``time`` column, every other numeric column a metric),
- a vllm-bisect session directory (its result.json: each judged commit's probe medians, in
  range order).

Points are ordered by time when every point has one, else as given (a session: range order).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vllm_bisect.errors import SpecError
from vllm_bisect.symptoms import Direction as SymptomDirection
from vllm_bisect.symptoms import Symptom

REF_KEYS = ("commit", "vllm_commit", "git_commit", "sha", "git_sha", "version", "vllm_version",
            "tag", "nightly", "ref", "label")
TIME_KEYS = ("time", "timestamp", "date", "datetime", "created_at")
# a bench serve result's own settings (the benchmark the series ran)
BENCH_SETTINGS = ("model_id", "num_prompts", "max_concurrency", "request_rate", "burstiness",
                  "backend", "endpoint_type")
# metrics of a bench serve result (per-request lists and settings are not metrics)
BENCH_METRIC = re.compile(r"^(mean|median|p\d+|std)_(ttft|tpot|itl|e2el)_ms$|"
                          r"^(output|request|total_token)_throughput$|"
                          r"^spec_decode_acceptance_(length|rate)$")
SESSION_METRICS = ("itl_ms", "chunk_itl_ms", "tpot_ms", "ttft_ms", "tokens_per_chunk",
                   "acceptance_length", "mtp_speedup")
SHA_IN_TEXT = re.compile(r"(?:\+g|nightly-|-g|^|[^0-9a-f])([0-9a-f]{7,40})(?=$|[^0-9a-f])")
MAX_FILES = 10_000
MAX_FILE_BYTES = 64 << 20
# a CSV / JSON-lines series' points, at most (reading costs grow with the rows:
# docs/design-notes.md)
MAX_POINTS = 100_000


@dataclass(frozen=True)
class Point:
    ref: str                          # the commit, version or tag as the series gives it
    values: dict[str, float]
    time: datetime | None = None
    commit: str | None = None         # the full sha, once resolved in a repository
    # metrics whose value here is inf or nan: left out of the metric's series, and reported
    nonfinite: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.commit or self.ref


@dataclass(frozen=True)
class Series:
    source: str                       # "bench-serve", "csv", "jsonl" or "session"
    points: tuple[Point, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> list[str]:
        """Every metric that at least four points have, in first-seen order."""
        seen: dict[str, int] = {}
        for p in self.points:
            for k in p.values:
                seen[k] = seen.get(k, 0) + 1
        return [k for k, n in seen.items() if n >= 4]

    def nonfinite(self) -> dict[str, list[tuple[str, float]]]:
        """Per metric, the points (ref, value) whose value is inf or nan: never dropped
        silently (a step to inf would otherwise read as "no change point")."""
        out: dict[str, list[tuple[str, float]]] = {}
        for p in self.points:
            for k, v in p.nonfinite.items():
                out.setdefault(k, []).append((p.key, v))
        return out

    def column(self, metric: str) -> tuple[list[Point], list[float]]:
        """The points that have ``metric``, and their values."""
        pts = [p for p in self.points if metric in p.values]
        return pts, [p.values[metric] for p in pts]


# the words of a metric that goes up when things get better, besides the symptoms' whose
# number falls when they show (throughput: the symptoms' registry)
RATE_WORDS = ("tok_s", "tokens_per_s", "per_second", "goodput", "acceptance", "speedup", "qps",
              "tokens_per_chunk")


def higher_is_better(metric: str) -> bool:
    """Throughput and acceptance go up when things get better; latencies go down."""
    m = metric.lower()
    falls = (w for s in Symptom if s.info.direction is SymptomDirection.FALLS
             for w in s.info.metric_words)
    return any(w in m for w in (*falls, *RATE_WORDS))


def sha_in(text: str) -> str | None:
    """A commit sha written inside a version, tag or file name (``+g<sha>``, ``nightly-<sha>``)."""
    m = SHA_IN_TEXT.search(text.lower())
    return m.group(1) if m else None


def parse_time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), tz=UTC)
    text = str(value).strip()
    for fmt in ("%Y%m%d-%H%M%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            pass
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _float(value: Any) -> float | None:
    """``value`` as a number (inf and nan included), None when it is not one."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _split(items: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """The numeric ``items``: finite ones, and those that are inf or nan."""
    values: dict[str, float] = {}
    bad: dict[str, float] = {}
    for k, v in items.items():
        if (f := _float(v)) is not None:
            (values if math.isfinite(f) else bad)[k] = f
    return values, bad


def _ref(record: dict[str, Any], fallback: str) -> str:
    for key in REF_KEYS:
        v = record.get(key)
        if isinstance(v, str) and v.strip():
            return v.strip()
    return fallback


def _time(record: dict[str, Any]) -> datetime | None:
    for key in TIME_KEYS:
        t = parse_time(record.get(key))
        if t is not None:
            return t
    return None


def _ordered(points: list[Point]) -> tuple[Point, ...]:
    if points and all(p.time is not None for p in points):
        points = sorted(points, key=lambda p: p.time or datetime.min.replace(tzinfo=UTC))
    return grouped(points)


def grouped(points: Sequence[Point]) -> tuple[Point, ...]:
    """``points`` with each commit's later measurements moved next to its first: a commit
    measured again later must not stand after its descendants (a window between them would
    run backwards in history)."""
    first: dict[str, int] = {}
    for i, p in enumerate(points):
        first.setdefault(p.key, i)
    return tuple(p for _, p in sorted(enumerate(points), key=lambda ip: (first[ip[1].key], ip[0])))


def _read_json(path: Path) -> Any:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise SpecError(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB",
                        hint="a benchmark result is a few KB: point watch at the results")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SpecError(f"{path} is not readable JSON: {e}",
                        hint="remove or fix that file, or point watch at another series") from None


def bench_point(path: Path, record: dict[str, Any]) -> Point:
    """One ``vllm bench serve --save-result`` file as a point of the series."""
    ref = _ref(record, "")
    if not ref or (ref == record.get("label") and not sha_in(ref)):
        ref = sha_in(path.stem) or ref or path.stem
    values, bad = _split({k: v for k, v in record.items() if BENCH_METRIC.match(k)})
    return Point(ref=ref, values=values, time=_time(record), nonfinite=bad)


def load_bench_dir(path: Path) -> Series:
    files = sorted(path.glob("*.json"))[:MAX_FILES + 1]
    if len(files) > MAX_FILES:
        raise SpecError(f"{path} holds more than {MAX_FILES} JSON files",
                        hint="point watch at one benchmark's results")
    points: list[Point] = []
    settings: dict[str, Any] = {}
    for f in files:
        rec = _read_json(f)
        if not isinstance(rec, dict) or not any(BENCH_METRIC.match(k) for k in rec):
            continue
        points.append(bench_point(f, rec))
        settings = {k: rec[k] for k in BENCH_SETTINGS if k in rec} or settings
    if not points:
        raise SpecError(f"no `vllm bench serve --save-result` JSON in {path}",
                        hint="save each run with --save-result (and --metadata commit=<sha>)")
    return Series("bench-serve", _ordered(points), settings)


def _record_point(record: dict[str, Any], i: int) -> Point:
    ref = _ref(record, f"#{i}")
    skip = set(REF_KEYS) | set(TIME_KEYS)
    values, bad = _split({k: v for k, v in record.items() if k not in skip})
    return Point(ref=ref, values=values, time=_time(record), nonfinite=bad)


def _capped(path: Path) -> None:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise SpecError(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB",
                        hint=f"watch reads at most {MAX_POINTS} points: pass the range of the "
                             "series to look at (one row per benchmark run)")


def _too_many(path: Path) -> SpecError:
    return SpecError(f"{path} holds more than {MAX_POINTS} points",
                     hint="pass a shorter stretch of the series (change points need tens to "
                          "thousands of points, not millions)")


def load_csv(path: Path) -> Series:
    _capped(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(itertools.islice(csv.DictReader(fh), MAX_POINTS + 1))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise SpecError(f"{path} is not a readable CSV file: {e}") from None
    if len(rows) > MAX_POINTS:
        raise _too_many(path)
    return Series("csv", _ordered([_record_point(r, i) for i, r in enumerate(rows)]))


def load_jsonl(path: Path) -> Series:
    points = []
    _capped(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path} is not a readable JSON-lines file: {e}") from None
    if sum(1 for line in lines if line.strip()) > MAX_POINTS:
        raise _too_many(path)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path}:{i + 1} is not JSON: {e}",
                            hint="one JSON object per line: commit, time, metrics") from None
        if isinstance(rec, dict):
            points.append(_record_point(rec, i))
    return Series("jsonl", _ordered(points))


def load_session(path: Path) -> Series:
    """A finished session's judged commits (range order) with their probe medians."""
    from vllm_bisect.report.result import BisectReport

    report = BisectReport.read(path / "result.json")
    points = []
    for j in report.judged():
        m = j.measurement
        if m is None:
            continue
        values, bad = _split({k: getattr(m, k, None) for k in SESSION_METRICS})
        points.append(Point(ref=j.commit, values=values, commit=j.commit, nonfinite=bad))
    return Series("session", grouped(points), {"session": str(path)})


def load_series(path: Path) -> Series:
    """The series at ``path`` (a directory of bench results or a session, a .csv, a .jsonl)."""
    if not path.exists():
        raise SpecError(f"series not found: {path}",
                        hint="pass a directory of bench results, a session, a .csv or a .jsonl")
    if path.is_dir():
        return load_session(path) if (path / "result.json").exists() else load_bench_dir(path)
    if path.suffix.lower() == ".csv":
        return load_csv(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return load_jsonl(path)
    raise SpecError(f"{path}: unknown series format",
                    hint="use a directory of `vllm bench serve --save-result` files, a "
                         "session directory, a .csv or a .jsonl file")
