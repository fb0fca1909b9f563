"""The two endpoints' environments: packages from a venv, logged VLLM_* variables."""

from __future__ import annotations

from pathlib import Path

from vllm_bisect.explain.envdiff import SideEnv, env_diff, logged_vars, venv_packages
from vllm_bisect.explain.report_section import env_lines

FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm-0.25.1"


def fake_venv(root: Path, pkgs: dict[str, str]) -> Path:
    sp = root / "lib" / "python3.11" / "site-packages"
    for name, ver in pkgs.items():
        d = sp / f"{name.replace('-', '_')}-{ver}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")
    return root


def test_packages_are_read_from_the_venv(tmp_path: Path) -> None:
    v = fake_venv(tmp_path, {"vllm": "0.25.1", "torch": "2.11.0+cu130", "Flash_Infer": "0.4"})
    assert venv_packages(v) == {"vllm": "0.25.1", "torch": "2.11.0+cu130", "flash-infer": "0.4"}


def test_logged_variables_over_the_given_ones() -> None:
    log = ("INFO envs.py:1] VLLM_USE_V1=1\n"
           "non-default env: {'VLLM_GDN_DECODE_KERNEL': 'triton', 'OTHER': 'x'}\n")
    got = logged_vars(log, {"VLLM_USE_V1": "0", "VLLM_BISECT_SESSION": "s", "HOME": "/"})
    assert got == {"VLLM_USE_V1": "1", "VLLM_GDN_DECODE_KERNEL": "triton"}


def test_variables_in_vllm_0_25_1s_prose_lines() -> None:
    # the real log (tests/fixtures/vllm-0.25.1/server_logs_last200.txt): a sentence's period
    # is not part of the value; advice to set or unset a variable is not a setting
    real = (FIXTURES / "server_logs_last200.txt").read_text()
    assert "VLLM_USE_FLASHINFER_SAMPLER=0." in real
    assert logged_vars(real, {}) == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    advice = ("WARNING FlashInfer top-p/top-k sampling unavailable: sm_121; falling back. "
              "Set VLLM_USE_FLASHINFER_SAMPLER=0 to silence.\n"
              "RuntimeError: unavailable. Unset VLLM_USE_FLASHINFER_SAMPLER=1.\n"
              "INFO (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0), VLLM_X=a.b.\n")
    assert logged_vars(advice, {"VLLM_Y": "2"}) == {
        "VLLM_Y": "2", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0", "VLLM_X": "a.b"}


def test_a_dependency_change_points_to_deps() -> None:
    a = SideEnv({"vllm": "1", "torch": "2.10", "numpy": "2"}, {"VLLM_X": "1"}, None)
    b = SideEnv({"vllm": "2", "torch": "2.11", "numpy": "2"}, {"VLLM_X": "2"}, None)
    d = env_diff(a, b)
    assert [c["name"] for c in d["packages"]] == ["torch", "vllm"]
    assert d["beyond_vllm"] == ["torch"]
    assert d["vllm_vars"] == [{"name": "VLLM_X", "parent": "1", "culprit": "2"}]
    text = "\n".join(env_lines(d))
    assert "more than vLLM itself" in text and "vllm-bisect deps SESSION" in text
    assert "torch (its CUDA build after the +): parent 2.10, culprit 2.11" in text
    only_vllm = env_diff(SideEnv({"vllm": "1"}, {}, None), SideEnv({"vllm": "2"}, {}, None))
    assert only_vllm["beyond_vllm"] == [] and "more than" not in "\n".join(env_lines(only_vllm))
    unknown = env_diff(SideEnv(None, {}, None, ["an image"]), SideEnv(None, {}, None))
    assert unknown["packages"] is None and "not compared (an image)" in env_lines(unknown)[0]


def test_a_venv_that_reuses_the_installed_torch_lists_it(tmp_path: Path) -> None:
    # a reuse_installed source build: vllm in the venv, torch seen through a .pth link to
    # the interpreter's packages (the GPU machine's /opt/torch/.venv); a name in both places
    # is the venv's own, as an import would find it
    import subprocess
    import sys

    parent = fake_venv(tmp_path / "parent", {"torch": "2.11.0+cu130", "vllm": "0.1"})
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    [own] = venv.glob("lib/python*/site-packages")
    d = own / "vllm-0.25.1.dist-info"
    d.mkdir()
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.25.1\n")
    [linked] = parent.glob("lib/python*/site-packages")
    (own / "_parent.pth").write_text(f"import site; site.addsitedir({str(linked)!r})\n")
    got = venv_packages(venv)
    assert got["torch"] == "2.11.0+cu130" and got["vllm"] == "0.25.1"
