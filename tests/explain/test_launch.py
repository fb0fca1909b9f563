"""Which profiler switch a commit gets, read from its source."""

from __future__ import annotations

import json
from pathlib import Path

import git

from tests.helpers import history
from vllm_bisect.explain.launch import CHEAPER, profiled_probe, profiler_switch
from vllm_bisect.spec import BisectSpec


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


def test_the_cheaper_fields_go_only_where_the_commit_declares_them(tmp_path: Path) -> None:
    # vLLM's configs forbid unknown keys: a field the commit's ProfilerConfig lacks would make
    # `vllm serve` exit, so each cheaper field is sent only where the commit declares it
    h = history(tmp_path, n_commits=3, profiler_config_from=1)
    repo = git.Repo(h.path)
    full = json.loads(profiler_switch(repo, h.shas[1], tmp_path).args[1])
    assert {k: full[k] for k in CHEAPER} == CHEAPER
    path = Path(h.path) / "vllm" / "config" / "profiler.py"
    path.write_text('"""An early ProfilerConfig."""\n\n\nclass ProfilerConfig:\n'
                    '    profiler: str | None = None\n    torch_profiler_dir: str = ""\n'
                    '    torch_profiler_with_stack: bool = True\n\n'
                    '    def compute_hash(self) -> str:\n        factors: list = []\n'
                    '        return str(factors)\n')
    repo.index.add([str(path)])
    early = repo.index.commit("an early ProfilerConfig").hexsha
    cfg = json.loads(profiler_switch(repo, early, tmp_path).args[1])
    assert set(cfg) == {"profiler", "torch_profiler_dir", "torch_profiler_with_stack"}
    assert cfg["torch_profiler_with_stack"] is False


def test_vllm_0_25_1s_profiler_config_gets_every_cheaper_field(tmp_path: Path) -> None:
    # the field list of vLLM 0.25.1's vllm/config/profiler.py (class body, abridged: the
    # docstrings between fields are kept in shape)
    text = ('@config\nclass ProfilerConfig:\n    """Dataclass which contains profiler config."""\n\n'
            '    profiler: ProfilerKind | None = None\n    """Which profiler to use.\n\n'
            "    - 'torch': Use PyTorch profiler.\"\"\"\n\n"
            '    torch_profiler_dir: str = ""\n    torch_profiler_with_stack: bool = True\n'
            '    torch_profiler_use_gzip: bool = True\n'
            '    torch_profiler_dump_cuda_time_total: bool = True\n'
            '    """If `True`, dumps total CUDA time."""\n    ignore_frontend: bool = False\n'
            '    delay_iterations: int = Field(default=0, ge=0)\n'
            '    max_iterations: int = Field(default=0, ge=0)\n')
    repo = git.Repo.init(tmp_path / "r")
    f = tmp_path / "r" / "vllm" / "config" / "profiler.py"
    f.parent.mkdir(parents=True)
    f.write_text(text)
    repo.index.add([str(f)])
    sha = repo.index.commit("profiler config").hexsha
    cfg = json.loads(profiler_switch(repo, sha, tmp_path).args[1])
    assert cfg == {"profiler": "torch", "torch_profiler_dir": str(tmp_path.absolute()),
                   **CHEAPER}


def test_the_profiled_probe_is_the_sessions_cut_to_the_explain_window() -> None:
    # vLLM's /stop_profile time grows with the events recorded: the profiled window is at
    # most explain.profile_requests requests of explain.profile_max_tokens tokens
    spec = BisectSpec.model_validate({"probe": {"requests": 3, "max_tokens": 256,
                                                "min_tokens": 200, "warmup": 1}})
    p = profiled_probe(spec)
    assert (p.requests, p.max_tokens, p.min_tokens, p.warmup) == (1, 128, 128, 0)
    assert p.prompt == spec.probe.prompt and p.mtp_speedup is None
    wide = spec.model_copy(update={"explain": spec.explain.model_copy(
        update={"profile_requests": 5, "profile_max_tokens": 1024})})
    p = profiled_probe(wide)
    assert (p.requests, p.max_tokens, p.min_tokens) == (3, 256, 200)  # never more than asked
    uncapped = BisectSpec.model_validate({"probe": {"max_tokens": None,
                                                    "send_max_tokens": False}})
    assert profiled_probe(uncapped).max_tokens is None
