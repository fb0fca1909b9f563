"""watch.md's table (issue 50 item 7): a cell never breaks its row (a note of several lines,
a "|"), and the window is said one way: points between and commits, as the terminal says."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vllm_bisect.watch.detect import DetectOptions
from vllm_bisect.watch.plan import find
from vllm_bisect.watch.render import WindowResult, markdown, window_text
from vllm_bisect.watch.series import load_series


def test_a_note_of_several_lines_stays_in_its_cell(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = [4.0 * (1.5 if i >= 12 else 1.0) * (1 + 0.01 * rng.standard_normal())
              for i in range(24)]
    (tmp_path / "s.csv").write_text("commit,itl_ms\n" + "".join(
        f"c{i},{v}\n" for i, v in enumerate(values)))
    series = load_series(tmp_path / "s.csv")
    findings = [f for f in find(series, ["itl_ms"], DetectOptions()) if f.cp.reported]
    assert findings
    note = "error: the build failed\n  at step 3 | exit 1\n"
    md = markdown(series, findings, {f.name: WindowResult(f.name, None, None, note)
                                     for f in findings}, {f.name: None for f in findings})
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    head = table[0].count("|") - table[0].count("\\|")
    assert len(table) == 2 + len(findings)
    for row in table:
        assert row.endswith("|") and row.count("|") - row.count("\\|") == head, row
    assert "error: the build failed at step 3 \\| exit 1 |" in table[2], table[2]
    assert "| points between | commits |" in table[0] and "| unknown |" in table[2]


def test_the_window_is_said_one_way() -> None:
    assert window_text(0, 4) == "0 points between, 4 commits"
    assert window_text(1, 1) == "1 point between, 1 commit"
    assert window_text(2, None) == "2 points between, commits unknown (no repository)"
