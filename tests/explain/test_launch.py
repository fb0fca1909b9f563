"""Which profiler switch a commit gets, read from its source."""

from __future__ import annotations

import json
from pathlib import Path

import git

from tests.helpers import history
from vllm_bisect.explain.launch import profiler_switch


def test_the_flag_where_the_commit_has_profiler_config_else_the_variable(tmp_path: Path
                                                                          ) -> None:
    h = history(tmp_path, n_commits=3, profiler_config_from=2)
    repo = git.Repo(h.path)
    old = profiler_switch(repo, h.shas[1], tmp_path / "t")
    assert old.args == [] and old.env == {"VLLM_TORCH_PROFILER_DIR": str(tmp_path / "t")}
    new = profiler_switch(repo, h.shas[2], Path("rel"))
    assert new.env == {} and new.args[0] == "--profiler-config"
    cfg = json.loads(new.args[1])
    assert cfg["profiler"] == "torch" and Path(cfg["torch_profiler_dir"]).is_absolute()
    assert profiler_switch(None, h.shas[2], tmp_path).env  # no source: the variable
