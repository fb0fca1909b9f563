"""The endpoints' environment diff, told before the search (issue 28): through the real CLI on
a synthetic history whose culprit bumps a dependency pin, resolved on a real PEP 503 index on
127.0.0.1 into real venvs; and the line's wording from package sets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import write_spec
from tests.isolate.helpers import source_spec
from vllm_bisect.bisect.endpoint_env import EndpointEnv
from vllm_bisect.sim.package_index import PackageIndex, build_package
from vllm_bisect.sim.synth import dependency_history
from vllm_bisect.spec.verdict import Strategy


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    tmp = tmp_path_factory.mktemp("index")
    dist = tmp / "dist"
    # a stand-in "torch" whose 2.10.0 caps speculative outputs (the culprit bumps the pin)
    for v, cap in (("2.9.0", "None"), ("2.10.0", "128")):
        build_package("torch", v, f'"""stand-in torch {v}"""\nSPEC_OUTPUT_CAP = {cap}\n', dist)
    with pytest.MonkeyPatch.context() as mp, PackageIndex(dist) as idx:
        mp.setenv("UV_CACHE_DIR", str(tmp / "uv-cache"))
        yield idx


@pytest.mark.parametrize("strategy", ["threshold", "auto"])
def test_run_says_the_endpoints_differ_in_torch_before_the_first_step(
        tmp_path: Path, index: PackageIndex, strategy: str) -> None:
    h = dependency_history(tmp_path / "vllm", "torch", "2.9.0", "2.10.0", before=2, after=1)
    base = source_spec(h, index.url)
    data = base.model_copy(update={"verdict": base.verdict.model_copy(
        update={"strategy": Strategy(strategy)})})
    spec = write_spec(tmp_path / "spec.toml", data)
    session = tmp_path / "s"
    r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                        "--session", str(session), "--cache-dir", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    told = [i for i, line in enumerate(lines) if "differ in more than vLLM" in line]
    assert len(told) == 1, r.stderr
    line = lines[told[0]]
    assert "(torch 2.9.0 -> 2.10.0)" in line and "see `vllm-bisect deps " in line
    # (the terminal's lines are 160 wide: the session's long path may go on in the next one)
    assert f"deps{session}`" in "".join(x.strip() for x in lines[told[0]:told[0] + 2])
    steps = [i for i, line in enumerate(lines) if " bisect " in line]
    endpoints = [i for i, line in enumerate(lines)
                 if re.search(r"s (good|bad) endpoint [0-9a-f]{12} ", line)]
    assert endpoints and max(endpoints) < told[0]
    # ... and kept: result.json's typed endpoint_env, and the report's section
    result = json.loads((session / "result.json").read_text())
    doc = result["endpoint_env"]
    assert {"name": "torch", "good": "2.9.0", "bad": "2.10.0"} in doc["packages"]
    assert doc["beyond_vllm"] == ["torch"] and doc["compared"]
    assert doc["deps_command"] == f"vllm-bisect deps {session}"
    assert "differ in more than vLLM (torch 2.9.0 -> 2.10.0)" in doc["line"]
    assert doc["good_judged"] is (strategy == "auto") and doc["bad"] == result["bad"]
    md = (session / "report.md").read_text()
    # the section named for the endpoints compares the endpoints only (issue 42)
    assert ("### Environments of the endpoints" in md) is (strategy == "threshold")
    assert ("(judged good) and the bad endpoint" in md) is (strategy == "auto")
    assert "`torch` 2.9.0 -> 2.10.0" in md and f"`vllm-bisect deps {session}`" in md
    assert "Environments of " in (session / "report.html").read_text()
    if strategy == "threshold":   # both endpoints run first: told before the first step
        assert told[0] < steps[0], r.stderr
    else:   # auto on a cap: the good endpoint is lazy; told at the first commit judged good
        good = next(i for i, ln in enumerate(lines) if "-> " in ln and " good: " in ln)
        assert good < told[0] < next(i for i in steps if i > good), r.stderr
        assert "judged good) and the bad endpoint differ in more than vLLM" in \
            " ".join(" ".join(lines).split())


def test_the_line_names_what_moved() -> None:
    same = EndpointEnv({"vllm": "1", "numpy": "2"}, {"vllm": "1", "numpy": "2"})
    assert same.line("S") == "the endpoints' environments: the same 2 packages"
    only = EndpointEnv({"vllm": "1", "numpy": "2"}, {"vllm": "2", "numpy": "2"})
    assert only.line("S") == "the endpoints' environments differ in vLLM only (vllm 1 -> 2)"
    other = EndpointEnv({"vllm": "1", "numpy": "2"}, {"vllm": "2", "numpy": "3", "rich": "1"})
    text = other.line("S")
    assert text is not None and "numpy 2 -> 3, rich (absent) -> 1" in text
    assert "more than vLLM" not in text
    deps = EndpointEnv({"vllm": "1", "torch": "2.9", "triton": "3.4"},
                       {"vllm": "2", "torch": "2.10", "triton": "3.5"})
    text = deps.line("S")
    assert text is not None and "(torch 2.9 -> 2.10, triton 3.4 -> 3.5)" in text
    assert "`vllm-bisect deps S`" in text
    # a command or URL artifact has no visible packages: nothing to say; an image that could
    # not be listed says why
    assert EndpointEnv(None, None).line("S") is None
    failed = EndpointEnv(None, {"vllm": "1"}, ("image r/v:1: its packages could not be listed",))
    # the subject is the line's own (a lazy good endpoint names the commit judged good)
    assert failed.line("S") == ("the endpoints' environments not compared: image r/v:1: its "
                                "packages could not be listed")
    assert failed.line("S", "abc (judged good)") == (
        "the environments of abc (judged good) and the bad endpoint not compared: image r/v:1: "
        "its packages could not be listed")
    assert str(deps.line("S", "abc (judged good)")).startswith(
        "the environments of abc (judged good) and the bad endpoint differ in more than vLLM")
