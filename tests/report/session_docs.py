"""Session directories written from result documents, for report tests that need exact
numbers (a real run's ITL noise is not reproducible): result.json and spec.toml, as
`vllm-bisect run` writes them; the report is then rendered by the real CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_bisect.models import Measurement, TokensSource, Verdict
from vllm_bisect.report.result import BisectReport, JudgedCommit, PerRequest, VerificationDoc


def sha(i: int) -> str:
    return f"{i:x}".rjust(4, "a") * 10


def measurement(out: list[int], itl: list[float]) -> Measurement:
    mid = sorted(itl)[len(itl) // 2]
    return Measurement(endpoint="completions", model="m", requested_tokens=160,
                       min_output_tokens=160, output_tokens=out, length_ok=min(out) >= 160,
                       itl_ms=mid, chunk_itl_ms=mid * 3, tokens_per_chunk=3.0, ttft_ms=10.0,
                       tpot_ms=mid, finish_reasons=["length"] * len(out),
                       tokens_source=TokensSource.USAGE, acceptance_length=3.0)


def judged(i: int, verdict: str, out: list[int], itl: list[float], reason: str = "",
           **extra: Any) -> JudgedCommit:
    return JudgedCommit(commit=sha(i), index=i, subject=f"[Core] Change {i} (#{47000 + i})",
                        verdict=Verdict(verdict), reason=reason or verdict,
                        measurement=measurement(out, itl),
                        per_request=PerRequest(itl_ms=list(itl), output_tokens=out,
                                               text_sha256=[None] * len(out)), **extra)


def write_session(path: Path, probed: list[JudgedCommit], first_bad: int, n: int,
                  spec_toml: str, verification: VerificationDoc | None = None,
                  **extra: Any) -> Path:
    path.mkdir(parents=True)
    BisectReport(first_bad=sha(first_bad), first_bad_subject=f"[Core] Change {first_bad} "
                 f"(#{47000 + first_bad})", candidates=[sha(first_bad)], good=sha(0),
                 bad=sha(n), n_commits=n, probed=probed, verification=verification,
                 **extra).write(path / "result.json")
    (path / "spec.toml").write_text(spec_toml)
    return path


def verification(parent: int, culprit: int, before: tuple[list[int], list[float]],
                 after: tuple[list[int], list[float]]) -> VerificationDoc:
    return VerificationDoc(
        culprit=sha(culprit), parent=sha(parent), samples=len(after[0]), confirmed=True,
        culprit_verdict=Verdict.BAD, culprit_reason="bad", parent_verdict=Verdict.GOOD,
        parent_reason="good",
        culprit_per_request=PerRequest(itl_ms=list(after[1]), output_tokens=after[0],
                                       text_sha256=[None] * len(after[0])),
        parent_per_request=PerRequest(itl_ms=list(before[1]), output_tokens=before[0],
                                      text_sha256=[None] * len(before[0])))
