"""A study's section of result.json is written in one place, atomically (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_bisect.report.render import write_section


def test_a_section_without_a_result_goes_beside_it(tmp_path: Path) -> None:
    write_section(tmp_path, "knobs", {"rows": [1, 2]})
    assert json.loads((tmp_path / "knobs.json").read_text()) == {"rows": [1, 2]}
    assert not (tmp_path / "result.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["knobs.json"]  # no temporary left


def test_an_unknown_section_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no study section 'isolated'"):
        write_section(tmp_path, "isolated", {})
    assert not list(tmp_path.iterdir())


def test_a_section_replaces_its_file_by_a_rename(tmp_path: Path) -> None:
    """The old document is never truncated in place: a reader sees it whole or the new one."""
    path = tmp_path / "knobs.json"
    path.write_text("{}")
    before = path.stat().st_ino
    keep = path.with_name("keep")
    keep.hardlink_to(path)
    write_section(tmp_path, "knobs", {"rows": []})
    assert path.stat().st_ino != before
    assert keep.read_text() == "{}"   # the old file's content was not written over
    assert json.loads(path.read_text()) == {"rows": []}
