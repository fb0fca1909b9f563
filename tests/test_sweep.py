"""`vllm-bisect sweep`: MTP on vs off over concurrency x context at one commit (the simulator
behind a generated vLLM history, served by the source builder)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.models import LoadResult, Measurement, MtpCell, TokensSource
from vllm_bisect.sweep import rows_of, sweep_spec


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def test_sweep_prints_the_table_and_writes_the_report(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2, step_ms=3.0)
    spec = write_spec(tmp_path / "s.toml", make_spec(h, probe={"max_tokens": 16}))
    r = _cli("sweep", "--spec", str(spec), "--commit", h.good, "--concurrency", "1,3",
             "--context", "40,300", "--requests", "3", "--max-tokens", "96", "--out",
             str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    # issue 50, no long silence: a line per server and per cell of its grid (each cell
    # may run minutes on real vLLM; the grid ran with no line)
    assert r.stderr.count("starting server") == 2, r.stderr
    for n in range(1, 5):
        assert r.stderr.count(f"cell {n} of 4: ") == 2, r.stderr
    doc = json.loads(r.stdout)
    rows = doc["rows"]
    assert [(x["concurrency"], x["context_tokens"], x["prompt_tokens"]) for x in rows] == [
        (1, 40, 40), (1, 300, 300), (3, 40, 40), (3, 300, 300)]
    for x in rows:
        # K=3 at the simulator's 80% acceptance: ~2.95 tokens per step with MTP, 1 without
        # (the size of the gain depends on this machine's load: only its sign is checked)
        assert x["change_pct"] > 0 and x["on_tok_s"] > x["off_tok_s"] > 0, rows
        # 80% per position, stopping at the first rejection: 1.95 of 3 drafts accepted
        assert 0.4 < x["acceptance_rate"] < 0.9 and 2.2 < x["acceptance_length"] < 3.7
    md = (tmp_path / "out" / "sweep.md").read_text()
    assert "| concurrency | context (tokens) | MTP off tok/s | MTP on tok/s | change |" in md
    assert md.count("\n| 3 | ") == 2
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["rows"] == rows


def test_a_relative_cache_dir_is_the_working_directorys(tmp_path: Path) -> None:
    # (it failed with "No such file" under venvs/: the build ran tools elsewhere)
    h = history(tmp_path, n_commits=2, step_ms=3.0)
    spec = write_spec(tmp_path / "s.toml", make_spec(h, probe={"max_tokens": 16}))
    r = _cli("sweep", "--spec", str(spec), "--commit", h.good, "--concurrency", "1",
             "--context", "40", "--requests", "1", "--max-tokens", "16", "--cache-dir",
             "rel-cache", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "rel-cache").is_dir()


def test_sweep_without_speculation_is_a_user_error(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2)
    spec = make_spec(h).model_copy(update={"serve": make_spec(h).serve.model_copy(
        update={"speculative": None})})
    path = write_spec(tmp_path / "s.toml", spec)
    r = _cli("sweep", "--spec", str(path), "--commit", h.good)
    assert r.returncode == 2 and "no serve.speculative" in r.stderr
    assert "Traceback" not in r.stderr
    bad = _cli("sweep", "--spec", str(write_spec(tmp_path / "t.toml", make_spec(h))),
               "--commit", h.good, "--concurrency", "1,x")
    assert bad.returncode == 2 and "comma-separated integers" in bad.stderr


def test_rows_and_grid_defaults(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2)
    spec = sweep_spec(make_spec(h), context=[2048, 32768])
    assert spec.probe.mtp_speedup is not None
    assert spec.probe.mtp_speedup.concurrencies == [1, 4, 12]
    assert spec.probe.mtp_speedup.contexts == [2048, 32768]

    def load(c: int, tok_s: float, al: float | None) -> LoadResult:
        return LoadResult(concurrency=c, requests=c, errors=0, duration_s=1.0, output_tokens=1,
                          output_tok_s=tok_s, tpot_ms=None, context_tokens=32768,
                          prompt_tokens=32760, acceptance_length=al)

    m = Measurement(endpoint="completions", model="m", requested_tokens=1, min_output_tokens=1,
                    output_tokens=[1], length_ok=True, itl_ms=None, chunk_itl_ms=None,
                    tokens_per_chunk=None, ttft_ms=None, tpot_ms=None, finish_reasons=[],
                    tokens_source=TokensSource.USAGE,
                    mtp_cells=[MtpCell(concurrency=12, context_tokens=32768, on=load(12, 78.0, 3.16),
                                       off=load(12, 100.0, None), speedup=0.78)])
    (row,) = rows_of(m, 3)
    assert round(row.change_pct or 0, 6) == -22.0 and round(row.acceptance_rate or 0, 6) == 0.72
    assert row.prompt_tokens == 32760


def test_the_worst_cell_drives_the_mtp_verdict() -> None:
    from vllm_bisect.bisect.measurement.evaluate import with_mtp_off
    from vllm_bisect.models import Verdict
    from vllm_bisect.spec import Symptom, VerdictSpec
    from vllm_bisect.verdict.judge import Judge

    def load(c: int, ctx: int, tok_s: float) -> LoadResult:
        return LoadResult(concurrency=c, requests=c, errors=0, duration_s=1.0, output_tokens=1,
                          output_tok_s=tok_s, tpot_ms=None, context_tokens=ctx)

    cells = [MtpCell(concurrency=c, context_tokens=n, on=load(c, n, on))
             for c, n, on in ((1, 2048, 180.0), (12, 32768, 70.0))]
    m = Measurement(endpoint="completions", model="m", requested_tokens=1, min_output_tokens=1,
                    output_tokens=[1], length_ok=True, itl_ms=None, chunk_itl_ms=None,
                    tokens_per_chunk=None, ttft_ms=None, tpot_ms=None, finish_reasons=[],
                    tokens_source=TokensSource.USAGE, mtp_cells=cells, mtp_on=cells[0].on)
    paired = with_mtp_off(m, [load(1, 2048, 100.0), load(12, 32768, 100.0)])
    assert [c.speedup for c in paired.mtp_cells] == [1.8, 0.7]
    assert paired.mtp_speedup == 0.7 and paired.mtp_on is not None
    assert paired.mtp_on.concurrency == 12
    j = Judge(VerdictSpec(symptom=Symptom.MTP_SPEEDUP, min_mtp_speedup=1.0), None).judge(paired)
    assert j.verdict is Verdict.BAD
    assert "0.70x at concurrency 12, 32768-token context" in j.reason
