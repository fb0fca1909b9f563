"""A git history made from a vLLM source tree, with one regression planted in vLLM's own code.

``python -m vllm_bisect.sim source-history SRC OUT --kind cap --seed 1``: commit 0 is the
tree SRC (an unpacked vLLM sdist); commits 1..N make behaviour-neutral Python edits across
``vllm/`` (comments, notes); at one seeded position the planted commit also changes one real
file of vLLM (the regression) beside two neutral edits, so ``isolate`` can name the file. The
truth (position, sha, file) goes to ``OUT.planted.json``, beside the repository, which no
bisect reads.

Kinds (the edits are exact text replacements in vLLM 0.25.1's code; a tree whose text differs
is refused rather than planted somewhere else):

* ``cap``: ``ModelConfig.get_diff_sampling_param`` gains a default ``max_tokens`` of 128, so a
  chat request without max_tokens stops at 128 tokens (the #47297 symptom);
* ``spec``: the EAGLE/MTP proposer stops writing the sampled token into the draft model's
  input (a "redundant write" removed), so the drafts are made from a stale token and
  speculation accepts almost nothing (tokens per chunk -> ~1, per-token ITL up);
* ``host``: a few milliseconds of host work in ``Scheduler.schedule`` (every engine step);
* ``csrc``: the cap, plus an edit under ``csrc/`` in the same commit: a precompiled build of it
  (and of every later commit) must be a skip, never a stale binary.
"""

from __future__ import annotations

import json
import random
import shutil
import tarfile
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

import git

MIN_COMMITS = 24


class PlantKind(StrEnum):
    CAP = "cap"
    SPEC = "spec"
    HOST = "host"
    CSRC = "csrc"


@dataclass(frozen=True)
class Edit:
    path: str
    old: str
    new: str


CAP = Edit(
    "vllm/config/model.py",
    "        else:\n            diff_sampling_param = {}\n\n",
    "        else:\n            diff_sampling_param = {}\n\n"
    "        # Fall back to the generation config's length default when it gives none.\n"
    "        diff_sampling_param.setdefault(\"max_tokens\", config.get(\"max_new_tokens\", 128))\n\n",
)
SPEC = Edit(
    "vllm/v1/spec_decode/llm_base_proposer.py",
    "            # Replace the last token with the next token.\n"
    "            # E.g., [b1, b2, c1, c2, c3, c3] -> [a2, b2, b3, c2, c3, c4]\n"
    "            self.input_ids[token_indices_to_sample] = next_token_ids\n",
    "            # (the rotation above already leaves the next token in place)\n",
)
HOST = Edit(
    "vllm/v1/core/sched/scheduler.py",
    "        self.current_step += 1\n",
    "        self.current_step += 1\n"
    "        # Give the running queue a consistency pass before scheduling.\n"
    "        _check_until = time.perf_counter() + 0.006\n"
    "        while time.perf_counter() < _check_until:\n"
    "            pass\n",
)
CSRC_FILE = "csrc/ops.h"
PLANTS: dict[PlantKind, tuple[Edit, str]] = {
    PlantKind.CAP: (CAP, "[Frontend] Respect the generation config's length default"),
    PlantKind.SPEC: (SPEC, "[Spec Decode] Drop a redundant input write in the proposer"),
    PlantKind.HOST: (HOST, "[Core] Check the running queue before scheduling"),
    PlantKind.CSRC: (CAP, "[Kernel] Tidy ops.h; respect the generation config's length default"),
}
NOTES = (
    "# NOTE: keep this module free of import-time side effects.",
    "# NOTE: the helpers below are shared by the V1 engine.",
    "# TODO(cleanup): fold the small helpers here into their callers.",
    "# NOTE: see docs/design for the overall flow of this module.",
    "# NOTE: names below are part of the internal API; rename with care.",
)
TITLES = ("[Misc] Clarify a comment in {m}", "[Doc] Note the intent of {m}",
          "[Chore] Annotate {m}", "[Misc] Leave a TODO in {m}", "[Doc] Explain {m} briefly")


@dataclass(frozen=True)
class SourceHistory:
    path: Path
    shas: list[str]
    kind: PlantKind
    planted_index: int
    planted_file: str
    record: Path

    @property
    def good(self) -> str:
        return self.shas[0]

    @property
    def bad(self) -> str:
        return self.shas[-1]

    @property
    def planted(self) -> str:
        return self.shas[self.planted_index]


def unpack(src: Path, dest: Path) -> Path:
    """An sdist (``.tar.gz``) unpacked under dest, or a directory as is: the tree's root."""
    if src.is_dir():
        return src
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(src) as tar:
        tar.extractall(dest, filter="data")
    (root,) = [p for p in dest.iterdir() if p.is_dir()]
    return root


def _neutral(tree: Path, rel: str, note: str) -> None:
    """Insert a comment line after the file's leading comment block (behaviour-neutral)."""
    path = tree / rel
    lines = path.read_text().splitlines(keepends=True)
    at = 0
    while at < len(lines) and lines[at].startswith("#"):
        at += 1
    lines.insert(at, note + "\n")
    path.write_text("".join(lines))


def _apply(tree: Path, edit: Edit) -> None:
    path = tree / edit.path
    text = path.read_text() if path.is_file() else ""
    if text.count(edit.old) != 1:
        raise ValueError(f"{edit.path}: the text to plant at is not there exactly once "
                         "(not vLLM 0.25.1's code?)")
    path.write_text(text.replace(edit.old, edit.new))


# commit i is dated BASE_DATE + i hours: the same sdist, kind and seed give the same shas on
# any machine and day, so a GPU run's journal and result cache carried to a fresh machine
# (scripts/gpu_source_run.py --state) name the commits it regenerates
BASE_DATE = 1764547200  # 2025-12-01T00:00:00Z


def _commit(repo: git.Repo, message: str, paths: list[str], i: int) -> str:
    if paths:
        repo.git.add("--", *paths)
    when = f"{BASE_DATE + 3600 * i} +0000"
    with repo.git.custom_environment(GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when):
        repo.git.commit("-q", "--no-verify", "-m", message)
    return repo.head.commit.hexsha


def make_source_history(src: Path, out: Path, kind: PlantKind, seed: int = 0,
                        n_commits: int = MIN_COMMITS + 1) -> SourceHistory:
    """Build the history at ``out`` (made anew) and write ``out.planted.json``."""
    if n_commits < 3:
        raise ValueError("a history needs at least 3 commits after the base")
    rng = random.Random(f"{seed}:{kind}")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(unpack(src, out.parent / (out.name + ".src")), out, symlinks=True)
    repo = git.Repo.init(out, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "vLLM Dev")
        cw.set_value("user", "email", "dev@example.com")
    repo.git.add("-A", "-f", ".")
    shas = [_commit(repo, "Import vLLM source tree", [], 0)]
    py = sorted(str(p.relative_to(out)) for p in (out / "vllm").rglob("*.py")
                if p.stat().st_size > 0)
    planted_at = rng.randrange(2, n_commits)  # never the first or the last commit
    edit, title = PLANTS[kind]
    for i in range(1, n_commits + 1):
        files = rng.sample([p for p in py if p != edit.path], 2 if i == planted_at else 1)
        for rel in files:
            _neutral(out, rel, rng.choice(NOTES))
        if i == planted_at:
            _apply(out, edit)
            files.append(edit.path)
            if kind is PlantKind.CSRC:
                with open(out / CSRC_FILE, "a") as f:
                    f.write("// Keep the declarations above in sync with torch_bindings.cpp.\n")
                files.append(CSRC_FILE)
            message = title
        else:
            message = rng.choice(TITLES).format(m=Path(files[0]).stem)
        shas.append(_commit(repo, message, files, i))
    record = out.parent / (out.name + ".planted.json")
    h = SourceHistory(out, shas, kind, planted_at, edit.path, record)
    doc = {**asdict(h), "path": str(out), "record": str(record), "planted": h.planted,
           "seed": seed, "expect": "skip" if kind is PlantKind.CSRC else "first-bad"}
    record.write_text(json.dumps(doc, indent=2) + "\n")
    return h


# the tiny MTP model's serve line on one GPU (docs/validation.md (d)); a short max_model_len
# keeps an uncapped chat answer (max_model_len - prompt tokens) quick to stream
SERVE_ARGS = ["--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "640",
              "--gpu-memory-utilization", "0.3",
              "--additional-config", '{"gdn_prefill_backend": "triton"}']
PROMPT = " ".join(["hello"] * 20)


def source_spec_data(h: SourceHistory, model: str, wheel: str,
                     startup_timeout_s: float = 600.0) -> dict[str, object]:
    """The bisect spec of a source history (kind decides the probe and the symptom):
    the range, the precompiled source build from a local wheel, the tiny MTP model."""
    data: dict[str, object] = {
        "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
        "build": {"kind": "source", "precompiled": True, "full_build": False,
                  "wheel_location": wheel, "wheel_commit": h.good, "reuse_installed": True,
                  "editable": True},
        "serve": {"model": model, "args": SERVE_ARGS,
                  "env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"},
                  "speculative": {"method": "mtp", "num_speculative_tokens": 3}},
        "ops": {"startup_timeout_s": startup_timeout_s},
    }
    verify = {"verify_samples": 0}  # device time: no re-measured culprit/parent servers
    if h.kind in (PlantKind.CAP, PlantKind.CSRC):  # chat clients rely on server defaults
        data["probe"] = {"prompt": PROMPT, "endpoint": "chat", "send_max_tokens": False,
                         "max_tokens": None, "requests": 2, "warmup": 1}
        data["verdict"] = {"symptom": "length", "min_output_tokens": 256,
                           "intermittent_runs": 1, **verify}
    elif h.kind is PlantKind.SPEC:
        data["probe"] = {"prompt": PROMPT, "max_tokens": 256, "requests": 3, "warmup": 1}
        data["verdict"] = {"symptom": "itl", "itl_factor": 1.5, "strategy": "threshold",
                           **verify}
    else:  # the noisy case: the default strategy for itl (auto: the model of the range)
        data["probe"] = {"prompt": PROMPT, "max_tokens": 256, "requests": 3, "warmup": 1}
        data["verdict"] = {"symptom": "itl", "itl_factor": 1.15, **verify}
    return data
