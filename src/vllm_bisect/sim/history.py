"""Generate a git history shaped like vLLM, with regressions planted in its source.

Commit 0 is the good base; commits 1..n follow on one branch. Behaviour at each commit comes
from the committed files (``vllm/config/engine.py``, ``vllm/spec_decode/config.py``,
``vllm/transformers_utils/generation_config.py``), which the synthetic ``vllm serve`` reads.
"""

from __future__ import annotations

import os
import random
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from pprint import pformat

import git

from vllm_bisect.sim import template as t
from vllm_bisect.sim.profile_trace import kernel_table

FILLER_SUBJECTS = (
    "[Doc] Clarify speculative decoding metrics",
    "[CI] Split the spec-decode test group",
    "[Misc] Tidy logging in the scheduler",
    "[Bugfix] Fix typo in error message for max_model_len",
    "[Frontend] Accept stream_options on chat completions",
    "[Model] Add Qwen3.6 MoE config aliases",
    "[Core] Refactor KV cache block accounting",
    "[Perf] Avoid a host sync in the sampler",
    "[Kernel] Tune fused MoE configs for H200",
    "[Test] Add regression test for prefix caching",
    "[Hardware][NVIDIA] Enable FlashInfer on sm_121",
    "[Build] Update CUTLASS to v4.3",
    "[V1] Simplify the async output processor",
    "[Misc] Bump transformers pin",
    "[Bugfix] Handle empty prompts in the tokenizer",
    "[Frontend] Log the served model name",
)
CAP_SUBJECT = "[Spec Decode] Merge generation-config defaults into MTP requests"
SLOW_SUBJECT = "[Kernel] Route MTP verify steps through the packed GDN wrapper"
LOW_ACCEPT_SUBJECT = "[Spec Decode] Reuse the target model's rotary cache in the MTP head"
WRONG_SUBJECT = "[Kernel] Use the fast-math path in the fused sampler epilogue"
GEN_CAP_SUBJECT = "[Model] Ship generation_config.json with max_new_tokens=128"
BROKEN_SUBJECT = "[Build] Require CMake 3.31 for the CUDA 13 toolchain"
FIX_BUILD_SUBJECT = "[Build] Revert CMake minimum to 3.26"
FIX_SUBJECT = "[Bugfix] Restore the fused decode path for non-spec batches"
MEMORY_SUBJECT = "[Core] Keep an fp32 copy of the LM head for the sampler"
OOM_SUBJECT = "[Core] Profile the sampler warm-up with 4096 dummy requests"
TTFT_SUBJECT = "[Attention] Route long prefills through the unchunked kernel"
KERNEL_SUBJECT = "[Perf] Rework the decode step's fused kernels"


@dataclass(frozen=True)
class HistoryPlan:
    """What to plant. Indices are commit numbers 1..n (0 is the good base)."""

    n_commits: int = 60
    cap_at: int | None = None          # from here on: outputs capped at cap_tokens under spec
    cap_tokens: int = 128
    cap_probability: float = 1.0       # < 1: the cap hits only this share of requests (flaky)
    slow_at: int | None = None         # from here on: engine steps slow_factor x slower
    slow_factor: float = 7.0
    slow2_at: int | None = None        # a second slowdown from here on (x slow2_factor more)
    slow2_factor: float = 1.3
    gen_cap_at: int | None = None      # from here on: generation_config max_new_tokens=128
    gen_caps_explicit: bool = False
    unbuildable: tuple[int, ...] = ()  # these commits fail to build (the next one fixes it)
    wrong_output_at: int | None = None  # from here on: greedy text wrong after 40 tokens
    low_acceptance_at: int | None = None  # from here on: draft acceptance 0.1 (MTP gains ~0)
    slow_start: tuple[int, ...] = ()   # these commits take slow_start_s to start (weight load)
    slow_start_s: float = 60.0
    fixed_at: int | None = None        # from here on the planted cap and slowdown are gone
    memory_at: int | None = None       # from here on: weights take memory_factor x more memory
    memory_factor: float = 1.5
    oom_at: int | None = None          # from here on: the server runs out of memory starting
    ttft_at: int | None = None         # from here on: prefill ttft_factor x slower
    ttft_factor: float = 4.0
    weights_gib: float = 16.0
    budget_gib: float = 60.0           # GPU memory x gpu_memory_utilization
    step_ms: float = 10.0
    prefill_ms: float = 20.0
    acceptance: float = 0.8
    noise_cv: float = 0.0
    server_cv: float = 0.0             # each server start's own step-time level (CV)
    init_s: float = 0.2
    seed: int = 0
    subjects: tuple[tuple[int, str], ...] = ()  # (i, subject): commit i's own subject
    # a kernel-level planting (sim/profile_trace.py): from kernel_at on, a decode step gets
    # kernel_effect x step_ms longer through kernel_change ("slower": kernel_name slows;
    # "new": kernel_name appears; "host-gap": the GPU idles longer between steps); the ITL
    # rises by the same share. None: no kernel table in the commits (the default one)
    kernel_at: int | None = None
    kernel_change: str = "slower"
    kernel_name: str = "fused_moe_kernel"
    kernel_effect: float = 0.3
    # commits from here on take --profiler-config (vllm/config/profiler.py); before it, only
    # the VLLM_TORCH_PROFILER_DIR variable; None: no commit has the flag
    profiler_config_from: int | None = None


@dataclass(frozen=True)
class History:
    path: Path
    shas: tuple[str, ...]              # shas[0] is the base (good), shas[-1] the head (bad)
    planted: dict[str, str] = field(default_factory=dict)  # symptom -> sha
    unbuildable: tuple[str, ...] = ()

    @property
    def good(self) -> str:
        return self.shas[0]

    @property
    def bad(self) -> str:
        return self.shas[-1]


def _files(plan: HistoryPlan, i: int) -> dict[str, str]:
    fixed = plan.fixed_at is not None and i >= plan.fixed_at
    slow = plan.slow_at is not None and i >= plan.slow_at and not fixed
    cap = plan.cap_at is not None and i >= plan.cap_at and not fixed
    gen_cap = plan.gen_cap_at is not None and i >= plan.gen_cap_at
    broken = i in plan.unbuildable
    version = f"0.23.1rc1.dev{400 + i}"
    weights = plan.weights_gib * (plan.memory_factor if plan.memory_at is not None
                                  and i >= plan.memory_at else 1.0)
    kv_gib = -1.0 if plan.oom_at is not None and i >= plan.oom_at else plan.budget_gib - weights
    kernel = plan.kernel_at is not None and i >= plan.kernel_at
    base_ms = plan.step_ms * (plan.slow_factor if slow else 1.0)
    check = t.BROKEN_CHECK.format(message="CMake 3.31 or newer is required") if broken else ""
    files = {
        "pyproject.toml": t.PYPROJECT.format(version=version),
        "_build/backend.py": t.BACKEND.format(check=check),
        "vllm/__init__.py": t.INIT,
        "vllm/version.py": t.VERSION.format(version=version),
        "vllm/config/__init__.py": "",
        "vllm/config/engine.py": t.ENGINE_CONFIG.format(
            step_ms=round(base_ms * (plan.slow2_factor if plan.slow2_at is not None
                                     and i >= plan.slow2_at and not fixed else 1.0)
                          * (1.0 + plan.kernel_effect if kernel else 1.0), 3),
            prefill_ms=round(plan.prefill_ms * (plan.ttft_factor if plan.ttft_at is not None
                                                and i >= plan.ttft_at else 1.0), 3),
            weights_gib=round(weights, 3), kv_cache_gib=round(kv_gib, 3),
            init_s=plan.slow_start_s if i in plan.slow_start else plan.init_s,
            noise_cv=plan.noise_cv, server_cv=plan.server_cv,
            diverge=40 if plan.wrong_output_at is not None and i >= plan.wrong_output_at
            else None),
        "vllm/spec_decode/__init__.py": "",
        "vllm/spec_decode/config.py": t.SPEC_DECODE.format(
            acceptance=0.1 if plan.low_acceptance_at is not None and i >= plan.low_acceptance_at
            else plan.acceptance, cap=plan.cap_tokens if cap else None,
            cap_probability=plan.cap_probability),
        "vllm/transformers_utils/__init__.py": "",
        "vllm/transformers_utils/generation_config.py": t.GEN_CONFIG.format(
            max_new_tokens=128 if gen_cap else None, caps_explicit=plan.gen_caps_explicit),
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/cli/__init__.py": "",
        "vllm/entrypoints/cli/main.py": t.CLI_MAIN,
    }
    if plan.kernel_at is not None:
        kernels, gap = kernel_table(base_ms, plan.kernel_change if kernel else None,
                                    plan.kernel_name, plan.kernel_effect)
        files["vllm/v1/__init__.py"] = files["vllm/v1/worker/__init__.py"] = ""
        files["vllm/v1/worker/step_profile.py"] = t.STEP_PROFILE.format(
            kernels=pformat(list(kernels)), gap=gap)
    if plan.profiler_config_from is not None and i >= plan.profiler_config_from:
        files["vllm/config/profiler.py"] = t.PROFILER_CONFIG
    return files


def _plantings(plan: HistoryPlan) -> tuple[tuple[int | None, str, str | None], ...]:
    """(commit index, key in History.planted, the commit's subject; None: a filler subject)
    for every planting, in the order a commit with several takes its subject."""
    return ((plan.fixed_at, "fix", FIX_SUBJECT), (plan.cap_at, "length", CAP_SUBJECT),
            (plan.slow_at, "itl", SLOW_SUBJECT), (plan.kernel_at, "kernel", KERNEL_SUBJECT),
            (plan.gen_cap_at, "gen_config_length", GEN_CAP_SUBJECT),
            (plan.wrong_output_at, "correctness", WRONG_SUBJECT),
            (plan.low_acceptance_at, "mtp-speedup", LOW_ACCEPT_SUBJECT),
            (plan.memory_at, "memory", MEMORY_SUBJECT), (plan.oom_at, "oom", OOM_SUBJECT),
            (plan.ttft_at, "ttft", TTFT_SUBJECT), (plan.slow2_at, "itl2", None))


def generate_history(path: Path, plan: HistoryPlan) -> History:
    """Create a fresh repository at path with plan.n_commits commits after the base.

    The commits go in through one ``git fast-import`` (then the head read into the work tree), not a
    GitPython index add and commit per commit: ~20x less CPU for the same commits, shas
    included (author and committer dates in UTC)."""
    rnd = random.Random(plan.seed)
    path.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(path, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "vLLM Dev")
        cw.set_value("user", "email", "dev@vllm.invalid")
    when = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    planted: dict[str, int] = {}
    unbuildable: list[int] = []
    current: dict[str, str] = {}
    pr = 47000
    plantings = _plantings(plan)
    stream: list[bytes] = []
    for i in range(plan.n_commits + 1):
        files = _files(plan, i)
        if i == 0:
            files["README.md"] = t.README.format(rev=0)
            files["csrc/layernorm_kernels.cu"] = t.KERNEL_SOURCE.format(rev=0)
            subject = "[Core] Initial import"
        elif (planted_subject := next((sub for at, _, sub in plantings
                                       if at == i and sub is not None), None)):
            subject = planted_subject
        elif i in plan.unbuildable:
            subject = BROKEN_SUBJECT
        elif i - 1 in plan.unbuildable:
            subject = FIX_BUILD_SUBJECT
        else:
            subject = rnd.choice(FILLER_SUBJECTS)
            if "Kernel" in subject or "Build" in subject:
                files["csrc/layernorm_kernels.cu"] = t.KERNEL_SOURCE.format(rev=i)
            else:
                files[f"docs/changes/{i:05d}.md"] = f"{subject}\n"
        subject = dict(plan.subjects).get(i, subject)
        pr += rnd.randint(3, 40)
        changed = {p: text for p, text in files.items() if current.get(p) != text}
        if not changed:  # keep every commit a real change
            changed = {f"docs/changes/{i:05d}.md": f"{subject}\n"}
        current.update(changed)
        stamp = int((when + timedelta(hours=3 * i)).timestamp())
        message = f"{subject} (#{pr})\n\nSigned-off-by: vLLM Dev <dev@vllm.invalid>\n"
        stream.append(_fast_import_commit(stamp, message, changed))
        for at, key, _ in plantings:
            if i == at:
                planted[key] = i
        if i in plan.unbuildable:
            unbuildable.append(i)
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input=b"".join(stream),
                   check=True, capture_output=True, timeout=600)
    # the head's files into the index and the work tree, as a plumbing command: a checkout
    # would leave a "checkout: moving from main to main" reflog entry, and `@{-1}` would then
    # name the head (in a history made commit by commit it names nothing)
    repo.git.read_tree("-u", "--reset", "main")
    shas = tuple(repo.git.rev_list("--reverse", "main").split())
    if len(shas) != plan.n_commits + 1:
        raise RuntimeError(f"{path}: {len(shas)} commits written, {plan.n_commits + 1} planned")
    return History(path=path, shas=shas, planted={k: shas[i] for k, i in planted.items()},
                   unbuildable=tuple(shas[i] for i in unbuildable))


def _fast_import_commit(stamp: int, message: str, files: dict[str, str]) -> bytes:
    """One commit on main for ``git fast-import``: ``files`` (path -> text) written over the
    previous commit's tree, as vLLM Dev at ``stamp`` (seconds, UTC)."""
    who = f"vLLM Dev <dev@vllm.invalid> {stamp} +0000\n".encode()
    msg = message.encode()
    out = [b"commit refs/heads/main\nauthor " + who + b"committer " + who,
           b"data %d\n" % len(msg) + msg + b"\n"]
    for rel, text in files.items():
        data = text.encode()
        out.append(b"M 100644 inline " + rel.encode() + b"\ndata %d\n" % len(data) + data
                   + b"\n")
    return b"".join(out) + b"\n"


def sim_path() -> str:
    """What the synthetic ``vllm serve`` appends to sys.path to find the simulator."""
    import prometheus_client

    import vllm_bisect

    dirs = [str(Path(vllm_bisect.__file__).resolve().parent.parent),
            str(Path(prometheus_client.__file__).resolve().parent.parent)]
    return os.pathsep.join(dict.fromkeys(dirs))
