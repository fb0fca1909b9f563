"""Synthetic vLLM histories for the studies (tests, README): a culprit that touches many files
of which one is guilty, a culprit that only bumps a dependency pin, and a commit where one
serve knob caps the output.

The package is the simulator-backed synthetic vLLM of :mod:`vllm_bisect.sim.template`, with
three differences: ``vllm/spec_decode/config.py`` defines ``output_cap(attention_backend)``
(the commit's own code decides the cap), ``vllm serve`` accepts ``--attention-backend``, and
the in-tree build backend declares the runtime dependencies listed in
``requirements/common.txt`` (``Requires-Dist``), so an install resolves them on an index.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import git

from vllm_bisect.sim import template as t
from vllm_bisect.sim.history import History

_META = 'meta = f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {ver}\\n".encode()'
_REQUIRES = '''

def _requires():
    """Requires-Dist lines from requirements/common.txt (what vLLM's setup.py does)."""
    if not os.path.exists("requirements/common.txt"):
        return ""
    out = ""
    for line in open("requirements/common.txt"):
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            out += "Requires-Dist: " + line + "\\n"
    return out
'''

SPEC_CONFIG = '''\
"""Speculative decoding (synthetic): draft acceptance and output handling."""
{imports}
# Probability that each draft token is accepted, given the previous one was.
DRAFT_ACCEPTANCE = {acceptance}
# Maximum output tokens of a speculative request; None means no limit.
SPEC_MAX_OUTPUT_TOKENS = {cap}


def output_cap(attention_backend):
    """The output cap of a speculative request served with this attention backend."""
    return {cap_expr}
'''

CLI_MAIN = t.CLI_MAIN.replace(
    's.add_argument("--seed", type=int, default=None)',
    's.add_argument("--seed", type=int, default=None)\n'
    '    s.add_argument("--attention-backend", default="FLASH_ATTN")').replace(
    "spec_output_cap=spec.SPEC_MAX_OUTPUT_TOKENS,",
    "spec_output_cap=spec.output_cap(args.attention_backend),")

MODULE = '''\
"""Synthetic vLLM module {name} (revision {rev})."""
{imports}
TUNING = {value}


def describe():
    return "{name} tuned to %s" % TUNING
'''


DOCKERFILE = """\
# The vLLM Dockerfile (synthetic, laid out like vLLM's docker/Dockerfile)
ARG CUDA_VERSION={cuda}
ARG PYTHON_VERSION=3.12
ARG BUILD_BASE_IMAGE=nvidia/cuda:${{CUDA_VERSION}}-devel-ubuntu22.04
ARG PIP_INDEX_URL

FROM ${{BUILD_BASE_IMAGE}} AS base
ARG CUDA_VERSION
ARG FLASHINFER_GIT_REF="v0.3.1"
RUN uv pip install --system -r requirements/common.txt
"""


def _backend() -> str:
    text = t.BACKEND.format(check="")
    if _META not in text or "spec.output_cap" not in CLI_MAIN:
        raise RuntimeError("sim/template.py changed: update vllm_bisect.sim.synth")
    return text.replace(_META, _META.replace("\\n\".encode()", "\\n\" + _requires()).encode()")
                        .replace('meta = f"', 'meta = (f"')) + _REQUIRES


def base_files(version: str, spec_config: str, requirements: str | None = None
               ) -> dict[str, str]:
    files = {
        "pyproject.toml": t.PYPROJECT.format(version=version),
        "_build/backend.py": _backend(),
        "vllm/__init__.py": t.INIT,
        "vllm/version.py": t.VERSION.format(version=version),
        "vllm/config/__init__.py": "",
        "vllm/config/engine.py": engine_config(),
        "vllm/spec_decode/__init__.py": "",
        "vllm/spec_decode/config.py": spec_config,
        "vllm/transformers_utils/__init__.py": "",
        "vllm/transformers_utils/generation_config.py": t.GEN_CONFIG.format(
            max_new_tokens=None, caps_explicit=False),
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/cli/__init__.py": "",
        "vllm/entrypoints/cli/main.py": CLI_MAIN,
        "README.md": t.README.format(rev=0),
    }
    if requirements is not None:  # (not declared statically: installers must build to know)
        files["requirements/common.txt"] = requirements
        files["pyproject.toml"] += 'dynamic = ["dependencies"]\n'
    return files


def spec_config(cap: int | None = None, acceptance: float = 0.8,
                cap_expr: str = "SPEC_MAX_OUTPUT_TOKENS", imports: str = "") -> str:
    return SPEC_CONFIG.format(cap=cap, acceptance=acceptance, cap_expr=cap_expr,
                              imports=imports)


class _Writer:
    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.repo = git.Repo.init(path, initial_branch="main")
        self.when = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
        self.shas: list[str] = []
        self.pr = 48000

    def commit(self, files: Mapping[str, str | None], subject: str) -> str:
        for rel, text in files.items():
            target = self.path / rel
            if text is None:
                self.repo.index.remove([rel], working_tree=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            self.repo.index.add([rel])
        actor = git.Actor("vLLM Dev", "dev@vllm.invalid")
        stamp = (self.when + timedelta(hours=2 * len(self.shas))).strftime("%Y-%m-%dT%H:%M:%S")
        self.pr += 7
        sha = self.repo.index.commit(f"{subject} (#{self.pr})", author=actor, committer=actor,
                                     author_date=stamp, commit_date=stamp).hexsha
        self.shas.append(sha)
        return sha

    def filler(self, i: int) -> str:
        return self.commit({f"docs/changes/{i:05d}.md": f"note {i}\n"},
                           "[Doc] Clarify speculative decoding metrics")


@dataclass(frozen=True)
class WideCulprit:
    history: History
    culprit: str
    guilty_file: str
    guilty_hunk: str       # the changed line of the guilty hunk
    files: tuple[str, ...]  # every file the culprit touches


def engine_config(step_ms: float = 1.0, noise_cv: float = 0.0, server_cv: float = 0.0) -> str:
    return t.ENGINE_CONFIG.format(step_ms=step_ms, init_s=0.0, noise_cv=noise_cv,
                                  server_cv=server_cv, diverge=None, prefill_ms=20.0,
                                  weights_gib=16.0, kv_cache_gib=40.0)


def wide_culprit_history(path: Path, n_files: int = 20, before: int = 3, after: int = 3,
                         slowdown: float | None = None) -> WideCulprit:
    """A refactor touching ``n_files`` files (modified, added, deleted; an import that only
    works with its new helper module) of which one hunk of ``vllm/spec_decode/config.py``
    caps speculative outputs at 128 tokens; ``before``/``after`` harmless commits around it.
    With ``slowdown``, a noisy ITL regression instead: the engine steps take 4 ms with 5%
    per-request and 5% per-server-start noise, and the culprit's one hunk of
    ``vllm/config/engine.py`` makes them ``slowdown`` times slower (its changes of the spec
    config and of ``vllm/__init__.py`` are then harmless: every subset serves)."""
    assert n_files >= 6 + (slowdown is not None)
    w = _Writer(path)
    n_mods = n_files - 4 - (slowdown is not None)  # + helper, removed module, __init__, spec
    mods = [f"vllm/model_executor/layers/mod_{k:02d}.py" for k in range(n_mods)]
    files: dict[str, str | None] = {**base_files("0.26.0rc1.dev100", spec_config())}
    if slowdown is not None:
        files["vllm/config/engine.py"] = engine_config(4.0, 0.05, 0.05)
    for k, m in enumerate(mods):
        files[m] = MODULE.format(name=m, rev=0, value=k, imports="")
    files["vllm/model_executor/layers/legacy_fused.py"] = MODULE.format(
        name="legacy_fused", rev=0, value=0, imports="")
    w.commit(files, "[Core] Initial import")
    for i in range(before):
        w.filler(i)
    change: dict[str, str | None] = {m: MODULE.format(name=m, rev=1, value=k * 10, imports="")
                                     for k, m in enumerate(mods)}
    change["vllm/model_executor/layers/legacy_fused.py"] = None
    change["vllm/utils/tuning_helpers.py"] = 'SCALE = 10\n'
    change["vllm/__init__.py"] = t.INIT + (  # (the slowdown's history: no untestable subset)
        "from vllm.utils.tuning_helpers import SCALE  # noqa\n" if slowdown is None
        else "# layer tuning helpers: vllm.utils.tuning_helpers\n")
    if slowdown is None:
        change["vllm/spec_decode/config.py"] = spec_config(cap=128, acceptance=0.85)
        guilty = ("vllm/spec_decode/config.py", "SPEC_MAX_OUTPUT_TOKENS = 128")
    else:
        change["vllm/spec_decode/config.py"] = spec_config(imports="# (unified output handling)\n")
        step = 4.0 * slowdown
        change["vllm/config/engine.py"] = engine_config(step, 0.05, 0.05)
        guilty = ("vllm/config/engine.py", f"DECODE_STEP_MS = {step}")
    culprit = w.commit(change, "[Refactor] Unify layer tuning and spec-decode output handling")
    for i in range(after):
        w.filler(before + i)
    hist = History(path=path, shas=tuple(w.shas),
                   planted={"length" if slowdown is None else "itl": culprit})
    touched = tuple(sorted(change))
    assert len(touched) == n_files, touched
    return WideCulprit(hist, culprit, guilty[0], guilty[1], touched)


def dependency_history(path: Path, package: str = "tinydep", old: str = "1.0",
                       new: str = "1.4", before: int = 2, after: int = 2,
                       code_cap: bool = False, also: Mapping[str, tuple[str, str]] | None = None,
                       cuda: tuple[str, str] | None = None) -> History:
    """A vLLM whose speculative output cap comes from ``package`` (``SPEC_OUTPUT_CAP``); the
    culprit bumps its pin in requirements/common.txt from ``old`` to ``new`` and, with
    ``code_cap``, also caps outputs at 128 in its own code (the code is then the cause).
    ``also``: other packages (name -> (old, new)) pinned beside it and bumped by the same
    commit (installed, never imported: harmless). ``cuda``: (old, new) ``CUDA_VERSION`` of a
    ``docker/Dockerfile`` laid out like vLLM's, bumped by the same commit too."""
    others = sorted((also or {}).items())
    w = _Writer(path)
    cfg = spec_config(cap_expr=f'getattr({package}, "SPEC_OUTPUT_CAP", None)',
                      imports=f"import {package}\n")
    first = base_files("0.26.0rc1.dev200", cfg, f"{package}=={old}\n"
                       + "".join(f"{n}=={o}\n" for n, (o, _) in others))
    if cuda is not None:
        first["docker/Dockerfile"] = DOCKERFILE.format(cuda=cuda[0])
    w.commit(first, "[Core] Initial import")
    for i in range(before):
        w.filler(i)
    change = {"requirements/common.txt": f"{package}=={new}\n"
              + "".join(f"{n}=={v}\n" for n, (_, v) in others)}
    if cuda is not None:
        change["docker/Dockerfile"] = DOCKERFILE.format(cuda=cuda[1])
    if code_cap:
        change["vllm/spec_decode/config.py"] = spec_config(
            cap_expr="128", imports=f"import {package}  # noqa: F401\n")
    culprit = w.commit(change, f"[Deps] Bump {package} to {new}"
                       + "".join(f", {n} to {v}" for n, (_, v) in others)
                       + (" and merge the generation-config cap" if code_cap else ""))
    for i in range(after):
        w.filler(before + i)
    return History(path=path, shas=tuple(w.shas), planted={"length": culprit})


def knob_history(path: Path) -> History:
    """Two commits; at the second, serving with ``--attention-backend TRITON_ATTN`` caps
    speculative outputs at 128 tokens (other backends and env vars change nothing)."""
    w = _Writer(path)
    w.commit(base_files("0.26.0rc1.dev300", spec_config()), "[Core] Initial import")
    bad = w.commit({"vllm/spec_decode/config.py": spec_config(
        cap_expr='128 if attention_backend == "TRITON_ATTN" else SPEC_MAX_OUTPUT_TOKENS')},
        "[Attention] Route MTP verify steps through the Triton backend's paged path")
    return History(path=path, shas=tuple(w.shas), planted={"knob": bad})
