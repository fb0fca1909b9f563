"""The TTFT symptom end to end, declared in one module (``symptoms/ttft.py``) and registered by
one line (issue 52 item 1): ``vllm-bisect run`` and its report's symptom table, ``git bisect
run vllm-bisect hook``, triage's spec, the bot's request and a watched metric's window, each
on real parts (generated histories served by the simulator, the real CLI, real git)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.bisect.test_hook_parity import hook_first_bad, sim_serve, spec_for
from tests.helpers import history, make_spec, write_spec
from tests.test_cli import cli
from tests.watch.test_series import bench_dir
from vllm_bisect.bot.commands import parse_command
from vllm_bisect.bot.policy import Allowlist, effective_spec
from vllm_bisect.spec import Symptom, parse_spec
from vllm_bisect.triage import spec_from_triage, triage

# a history whose commit 4 makes the prefill 4x slower (the simulator paces what each
# commit's source says), probed with a long prompt and few output tokens
SLOW_PREFILL = {"n_commits": 10, "ttft_at": 4, "ttft_factor": 4.0, "prefill_ms": 15.0,
                "noise_cv": 0.02}
PROBE = {"max_tokens": 8, "prompt_tokens": 1024}


def test_run_finds_it_and_the_report_s_table_shows_the_verdicts(tmp_path: Path) -> None:
    h = history(tmp_path, **SLOW_PREFILL)
    spec = write_spec(tmp_path / "s.toml", make_spec(
        h, serve={"speculative": None}, probe=PROBE,
        verdict={"symptom": "ttft", "ttft_factor": 2.0, "rest_check": False,
                 "verify_samples": 0}))
    session = tmp_path / "sess"
    r = cli("run", "--spec", str(spec), "--session", str(session), "--cache-dir",
            str(tmp_path / "cache"), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["first_bad"] == h.planted["ttft"]
    md = cli("report", str(session), "--format", "md")
    assert md.returncode == 0, md.stderr
    head = md.stdout.index("| # | length | itl | ttft |")   # the table has a ttft column
    caption = md.stdout[md.stdout.index("Symptoms at each judged commit"):].split("\n", 1)[0]
    assert "ttft: the verdict (changepoint: smallest change that matters 2x" in caption
    assert "`ttft` flips at commit #4" in md.stdout, md.stdout[head:head + 2000]


def test_git_bisect_run_with_the_hook_finds_it(tmp_path: Path) -> None:
    h = history(tmp_path, **SLOW_PREFILL)
    spec = spec_for(h, sim_serve(), probe=PROBE,
                    verdict={"symptom": "ttft", "strategy": "threshold", "ttft_factor": 2.0})
    first_bad, _ = hook_first_bad(h, spec, tmp_path)
    assert first_bad == h.planted["ttft"]


REPORT = """[Performance]: TTFT regression in v0.11.0

### Your current environment
vllm 0.11.0 on H100

### 🐛 Describe the bug
TTFT regression after upgrading: the first token takes much longer.
Good: v0.10.2, mean TTFT 51 ms. Bad: v0.11.0, mean TTFT 80 ms (same prompt of 2000 tokens).
`vllm serve Qwen/Qwen3-8B`
"""


def test_triage_writes_a_ttft_spec_and_the_bot_keeps_it() -> None:
    t = triage(REPORT)
    assert t.symptom == "ttft"
    doc = spec_from_triage(t)
    assert doc["verdict"]["symptom"] == "ttft" and doc["verdict"]["ttft_factor"] == 1.5
    assert doc["probe"]["prompt_tokens"] == 2048
    assert parse_spec(doc).verdict.symptom is Symptom.TTFT
    # the bot: triage's symptom and its factor pass the allowlist; a maintainer may name it
    plan = effective_spec({}, {}, {"symptom": "ttft", "verdict": {"ttft_factor": 1.6}},
                          Allowlist(serve_flags=frozenset(), env=frozenset()))
    assert plan.spec["verdict"] == {"symptom": "ttft", "ttft_factor": 1.6}
    assert parse_command("good=v0.10.2 bad=v0.11.0 symptom=ttft")["symptom"] == "ttft"


def test_a_watched_ttft_step_is_bisected_as_ttft_with_its_factor(tmp_path: Path) -> None:
    from vllm_bisect.watch.plan import find, window_spec
    from vllm_bisect.watch.series import load_series

    refs = [f"{i:07x}" for i in range(40)]
    d = bench_dir(tmp_path, refs, [10.0] * 40)
    for i, f in enumerate(sorted(d.glob("bench-*.json"))):
        doc = json.loads(f.read_text())
        doc["mean_ttft_ms"] = 50.0 * (1 + 0.01 * ((i * 7) % 5 - 2)) * (1.6 if i >= 25 else 1)
        f.write_text(json.dumps(doc))
    s = load_series(d)
    f = next(x for x in find(s, ["mean_ttft_ms"]) if x.cp.reported)
    spec = window_spec(parse_spec({}), s, f)
    assert spec.verdict.symptom is Symptom.TTFT
    assert spec.verdict.ttft_factor is not None and 1.1 < spec.verdict.ttft_factor < 1.4


def test_the_cli_names_it() -> None:
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--help"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "200"})
    assert "ttft" in r.stdout and "memory" in r.stdout, r.stdout
