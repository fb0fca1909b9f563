"""The command builder bisecting a serve-configuration history on the simulator.

The same history and specs run against real vLLM in tests/gpu (docs/validation.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.bisect.test_driver import run_driver
from tests.config_specs import config_spec, fake_model_dir
from vllm_bisect.bisect.range import open_repo
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.builders.command import CommandBuilder
from vllm_bisect.errors import BuildError
from vllm_bisect.sim.config_history import generate_config_history


def sim_env(tmp: Path) -> dict[str, str]:
    return {"BASE_MODEL": str(fake_model_dir(tmp / "base-model")),
            "VLLM": f"{sys.executable} -m vllm_bisect.sim vllm",
            "VLLM_SIM_STEP_MS": "2.5", "VLLM_SIM_SPEC_STEP_MS": "3.2",
            "VLLM_SIM_STARTUP_S": "0.1"}


@pytest.mark.parametrize("symptom", ["itl", "length"])
def test_both_planted_serve_changes_found(tmp_path: Path, symptom: str) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=12, spec_removed_at=7,
                                gen_cap_at=4)
    spec = config_spec(h, symptom, sim_env(tmp_path), startup_timeout_s=30)
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted[symptom]
    assert r.server_starts <= 2 + 4  # endpoints + ceil(log2 12)
    if symptom == "itl":
        good = next(o for o in r.probed if o.commit == h.good)
        bad = next(o for o in r.probed if o.commit == h.bad)
        assert good.measurement and bad.measurement
        assert good.measurement.itl_ms and bad.measurement.itl_ms
        assert bad.measurement.itl_ms / good.measurement.itl_ms > 2.5
        assert good.measurement.tokens_per_chunk and good.measurement.tokens_per_chunk > 3.5


def test_setup_failure_is_a_build_error(tmp_path: Path) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=2)
    b = CommandBuilder(Checkouts(open_repo(h.path), tmp_path / "cache"), setup="exit 7",
                       serve="true", log_dir=tmp_path / "logs")
    with pytest.raises(BuildError, match="exit code 7"):
        b.prepare(h.bad)


def test_checkouts_are_cached_and_exact(tmp_path: Path) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=3)
    co = Checkouts(open_repo(h.path), tmp_path / "cache")
    a = co.get(h.shas[1])
    (a / "marker").write_text("x")
    assert co.get(h.shas[1]) == a and (a / "marker").exists()
    assert "revision 1" in (a / "serve.sh").read_text()
    assert "revision 3" in (co.get(h.shas[3]) / "serve.sh").read_text()


def test_setup_runs_without_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-test")
    monkeypatch.setenv("VLLM_BISECT_WEBHOOK_SECRET", "whsec-test")
    monkeypatch.setenv("HF_TOKEN", "hf-test")
    h = generate_config_history(tmp_path / "configs", n_commits=2)
    dump = tmp_path / "environ"
    b = CommandBuilder(Checkouts(open_repo(h.path), tmp_path / "cache"),
                       setup=f"cat /proc/$$/environ > {dump}", serve="true",
                       log_dir=tmp_path / "logs", env={"FROM_SPEC": "1"})
    b.prepare(h.bad)
    names = {e.split(b"=", 1)[0] for e in dump.read_bytes().split(b"\0") if e}
    assert {b"FROM_SPEC", b"VLLM_BISECT_COMMIT", b"PATH"} <= names
    assert not names & {b"GITHUB_TOKEN", b"VLLM_BISECT_WEBHOOK_SECRET", b"HF_TOKEN"}


def test_serve_template_takes_the_speculative_config() -> None:
    import shlex

    from vllm_bisect.builders.base import Artifact, ArtifactKind
    from vllm_bisect.runtime.launch import launch_plan
    from vllm_bisect.spec import ServeSpec, SpeculativeSpec

    art = Artifact(commit="c" * 40, kind=ArtifactKind.COMMAND, identity="x",
                   serve_template="vllm serve {model} --port {port} {speculative}")
    on = launch_plan(art, ServeSpec(model="m", speculative=SpeculativeSpec()), 8123)
    assert on is not None and on.shell is not None
    assert shlex.split(on.shell) == ["vllm", "serve", "m", "--port", "8123", "--speculative-config",
                                     '{"method":"mtp","num_speculative_tokens":3}']
    off = launch_plan(art, ServeSpec(model="m", speculative=None), 8123)
    assert off is not None and off.shell is not None
    assert shlex.split(off.shell) == ["vllm", "serve", "m", "--port", "8123"]
