"""vLLM's own benchmarks as probes: ``vllm bench serve`` and ``vllm bench throughput``.

Run with the artifact's ``vllm`` (its venv's, else the one on PATH), with the spec's extra
arguments (e.g. ``--dataset-name prefix_repetition``, ``--async-engine``), and parsed from the
files they write: ``vllm bench serve --save-result --result-dir D --result-filename F`` (keys
``output_throughput``, ``total_token_throughput``, ``request_throughput``, ``median_tpot_ms``,
``median_ttft_ms``, ``completed``, ``failed``) and ``vllm bench throughput --output-json F``
(keys ``elapsed_time``, ``num_requests``, ``total_num_tokens``, ``requests_per_second``,
``tokens_per_second``, total tokens: prompt and output). The throughput JSON of vLLM 0.25.1 has
no output-token rate; it is taken from the line ``Throughput: X requests/s, Y total tokens/s,
Z output tokens/s`` that the command prints. Formats checked against vLLM 0.25.1's files
(tests/fixtures/vllm-0.25.1-bench).
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_bisect.errors import ProbeError
from vllm_bisect.models import BenchResult

logger = logging.getLogger(__name__)
THROUGHPUT_LINE = re.compile(r"Throughput:\s*([\d.]+)\s*requests/s,\s*([\d.]+)\s*total tokens/s,"
                             r"\s*([\d.]+)\s*output tokens/s")


def _num(d: Mapping[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) else None


def parse_serve(doc: Mapping[str, Any]) -> BenchResult:
    out = _num(doc, "output_throughput")
    if out is None:
        raise ProbeError("vllm bench serve result has no output_throughput",
                         hint="is this a `--save-result` file of vllm bench serve?")
    return BenchResult(tool="serve", output_tok_s=out,
                       total_tok_s=_num(doc, "total_token_throughput"),
                       requests_s=_num(doc, "request_throughput"),
                       tpot_ms=_num(doc, "median_tpot_ms"), ttft_ms=_num(doc, "median_ttft_ms"),
                       completed=int(doc.get("completed") or 0), failed=int(doc.get("failed") or 0),
                       duration_s=_num(doc, "duration"))


def parse_throughput(doc: Mapping[str, Any], stdout: str = "") -> BenchResult:
    total = _num(doc, "tokens_per_second")
    if total is None:
        raise ProbeError("vllm bench throughput result has no tokens_per_second",
                         hint="is this an `--output-json` file of vllm bench throughput?")
    m = THROUGHPUT_LINE.search(stdout)
    return BenchResult(tool="throughput", output_tok_s=float(m.group(3)) if m else None,
                       total_tok_s=total, requests_s=_num(doc, "requests_per_second"),
                       completed=int(doc.get("num_requests") or 0),
                       duration_s=_num(doc, "elapsed_time"))


def _run(argv: list[str], env: Mapping[str, str] | None, timeout_s: float, log: Path) -> str:
    with open(log, "a") as fh:
        fh.write("$ " + " ".join(argv) + "\n")
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                           env=dict(env) if env is not None else None)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ProbeError(f"{argv[0]} {' '.join(argv[1:3])} failed: {err}",
                         hint="check that the artifact's vllm has the bench command") from None
    with open(log, "a") as fh:
        fh.write(r.stdout[-20000:] + r.stderr[-20000:])
    if r.returncode != 0:
        raise ProbeError(f"{' '.join(argv[:3])} exited with {r.returncode}",
                         hint=f"see {log}", log_tail=r.stderr[-2000:])
    return r.stdout


def bench_serve(vllm: str, url: str, model: str, args: Sequence[str], *, log: Path,
                env: Mapping[str, str] | None = None, timeout_s: float = 1800) -> BenchResult:
    """``vllm bench serve`` against a running server."""
    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as d:
        argv = [vllm, "bench", "serve", "--base-url", url, "--model", model, *args,
                "--save-result", "--result-dir", d, "--result-filename", "result.json"]
        _run(argv, env, timeout_s, log)
        try:
            doc = json.loads((Path(d) / "result.json").read_text())
        except (OSError, ValueError) as err:
            raise ProbeError(f"vllm bench serve wrote no readable result: {err}",
                             hint=f"see {log}") from None
    return parse_serve(doc)


def bench_throughput(vllm: str, model: str, args: Sequence[str], *, log: Path,
                     env: Mapping[str, str] | None = None, timeout_s: float = 1800
                     ) -> BenchResult:
    """``vllm bench throughput`` (offline: it starts its own engine, so no server may hold
    the GPU meanwhile)."""
    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as d:
        out = Path(d) / "result.json"
        argv = [vllm, "bench", "throughput", "--model", model, *args, "--output-json", str(out)]
        stdout = _run(argv, env, timeout_s, log)
        try:
            doc = json.loads(out.read_text())
        except (OSError, ValueError) as err:
            raise ProbeError(f"vllm bench throughput wrote no readable result: {err}",
                             hint=f"see {log}") from None
    return parse_throughput(doc, stdout)
