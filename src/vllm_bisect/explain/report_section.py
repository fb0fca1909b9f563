"""The ``explain`` study's section of result.json and report.md/html (``SECTION``, registered
by its dotted path in :data:`vllm_bisect.report.sections.STUDY_SECTIONS`): its document's
model (:class:`ExplainDoc`) and its render: the step totals, the deltas beyond the run-to-run
spread, the plot, where the raw traces are, and the environment diff. The report imports it
only when a result.json has an ``explain`` key; the study writes the document
(``explain/run.py``) and takes the step totals' names from here."""

from __future__ import annotations

import re
from typing import Any

from vllm_bisect.report.section import SectionDoc, StudySection

# the step table's totals: always shown, never ranked as deltas (explain.diff computes them)
TOTALS = ("step:gpu_busy", "step:host", "step:launches", "step:launch_calls")
OUTPUT = "step:output_tokens"
COUNTS = ("step:launches", "step:launch_calls", OUTPUT)  # numbers per step, not times

LABELS = {"step:gpu_busy": "GPU busy (all kernels)", "step:gpu_idle": "GPU idle between steps",
          "step:host": "host time of the step", "step:launches": "kernels run",
          "step:launch_calls": "host launch calls (a CUDA graph is one)",
          "step:gpu_level": "every kernel alike (GPU clocks, or a GPU-wide change)",
          OUTPUT: "output tokens per decode step (1 + accepted drafts)",
          "token:gpu_busy": "GPU busy per output token",
          "token:host": "host time of the steps per output token"}
WHAT = {"kernel": "GPU kernel", "cpu_op": "CPU op", "step": "step"}


# template arguments that name no operation (skipped when a kernel's name is shortened)
GENERIC = frozenset({"gpu_kernel_impl", "gpu_kernel_impl_nocast", "BinaryFunctor",
                     "UnaryFunctor", "TensorIteratorBase", "OffsetCalculator",
                     "TrivialOffsetCalculator", "LoadWithCast", "StoreWithCast",
                     "LoadWithoutCast", "StoreWithoutCast", "array", "enable_sm90_or_later"})
OPERATION = re.compile(r"[A-Za-z_]\w*(?:Functor\w*|_kernel\w*|_cuda\w*|Op)\b")
CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z0-9]{5,}\w*\b")


def short_kernel(name: str) -> str:
    """A CUDA kernel's name as a reader scans it: real vLLM traces carry whole C++
    signatures (``void at::native::unrolled_elementwise_kernel<at::native::
    direct_copy_kernel_cuda(...)::{lambda...}, ...>(int, ...)``, 700 characters) ->
    ``unrolled_elementwise_kernel<direct_copy_kernel_cuda>``. Short names are kept."""
    n = name.removeprefix("void ").strip()
    if len(n) <= 60:
        return n
    n = n.replace("(anonymous namespace)::", "")
    if n.startswith("std::enable_if<") and "::type " in n:  # a return type before the name
        n = n.split("::type ", 1)[1]
    cut = [i for i in (n.find("<"), n.find("(")) if i > 0]
    if not cut:
        return n[:57] + "..."
    parts, args = n[:min(cut)].split("::"), n[min(cut):]
    base = "::".join(parts[-2:]) if parts[-1] == "kernel" else parts[-1]  # gemvx::kernel
    for rx in (OPERATION, CLASS_NAME):
        for m in rx.finditer(args):
            if m.group(0) not in GENERIC and m.group(0) != base:
                return f"{base}<{m.group(0)}>"
    return f"{base}<...>"


def _label(key: str) -> str:
    what, _, name = key.partition(":")
    if what == "step":
        return LABELS.get(key, name)
    return short_kernel(name) if what == "kernel" else name


def _num(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    if key == OUTPUT:
        return f"{v:.2f}"
    return f"{v:.1f}" if key in COUNTS else f"{v / 1000:.3f} ms"


def _change(d: dict[str, Any]) -> str:
    if d["kind"] in ("new", "gone"):
        return f"{d['kind']} ({d['diff'] / 1000:+.3f} ms)"
    r = d.get("ratio")
    return f"{(r - 1) * 100:+.1f}%" if r else f"{d['diff']:+.1f}"


def _kind_change(d: dict[str, Any]) -> str:
    return f"**{_change(d)}**" if d["kind"] in ("new", "gone") else \
        f"**{d['kind']}** {_change(d)}"


def _output_headline(doc: dict[str, Any]) -> list[str]:
    """When the output tokens per decode step moved beyond the spread, that is the first
    answer: every per-step cost is then paid for fewer (or more) tokens, even where no
    kernel moved (a drafter whose drafts stop being accepted: docs/validation.md (m))."""
    totals = {d["key"]: d for d in doc["totals"]}
    out = totals.get(OUTPUT)
    if not out or not out.get("beyond"):
        return []
    busy = totals.get("token:gpu_busy")
    fewer = out["diff"] < 0
    line = (f"Largest: **{'fewer' if fewer else 'more'} output tokens per decode step**, "
            f"{out['parent']:.2f} -> {out['culprit']:.2f} ({_change(out)}), beyond the "
            "run-to-run spread")
    if busy:
        line += f"; GPU busy per output token {_change(busy)}"
    line += (". Under speculative decoding a step yields 1 + its accepted drafts: "
             + ("fewer drafts are accepted (or proposed)." if fewer else
                "more drafts are accepted (or proposed)."))
    return ["", line]


def _setups(doc: dict[str, Any]) -> list[str]:
    """Two setups of one commit (``explain --against``): what each side served with."""
    setups = doc.get("setups")
    if not setups:
        return []
    out = [f"One commit, `{doc['culprit'][:12]}`, under two setups (setup A: the spec's; "
           "setup B: `--against`'s):", ""]
    for side, name in zip(("parent", "culprit"), ("setup A", "setup B"), strict=True):
        s = setups[side]
        spec = s.get("speculative")
        out.append(f"- {name}: `vllm serve {' '.join(s.get('args') or [])}`"
                   + (f", speculative {spec}" if spec else ", no speculative decoding")
                   + (f", env {s['env']}" if s.get("env") else ""))
    return [*out, ""]


def explain_lines(doc: dict[str, Any]) -> list[str]:
    k = doc["servers_per_side"]
    title = "### Why: the culprit's profile against its parent's" if not doc.get("setups") \
        else "### Why: one commit's profile under two setups"
    a, b = ("setup A", "setup B") if doc.get("setups") else ("parent", "culprit")
    out = ["", title, "", *_setups(doc),
           f"vLLM's torch profiler on {k} server{'s' if k > 1 else ''} per side "
           f"(`{doc['profiler'].get('culprit', '')}`), the session's probe between "
           f"`POST /start_profile` and `/stop_profile`; {doc['segmentation']}. "
           "Numbers are per decode step, averaged over each server's steps, then over servers.",
           "", f"| per decode step | {a} | {b} | change |", "|---|---|---|---|"]
    reported = {d["key"] for d in doc["deltas"]}
    for d in doc["totals"]:
        beyond = d.get("beyond", d["key"] in reported or d["key"] in TOTALS)
        mark = "" if beyond else " (within the spread)"
        out.append(f"| {LABELS.get(d['key'], d['key'])} | {_num(d['key'], d['parent'])} | "
                   f"{_num(d['key'], d['culprit'])} | {_change(d)}{mark} |")
    headline = _output_headline(doc)
    out += headline
    deltas = doc["deltas"]
    if deltas:
        out += ["", "Changes beyond the run-to-run spread (largest first):", "",
                f"| | name | {a} | {b} | change | spread |", "|---|---|---|---|---|---|"]
        for d in deltas[:15]:
            what = d["key"].partition(":")[0]
            out.append(f"| {WHAT.get(what, what)} | `{_label(d['key'])}` | "
                       f"{_num(d['key'], d['parent'])} | {_num(d['key'], d['culprit'])} | "
                       f"{_kind_change(d)} | {_num(d['key'], d['spread'])} |")
        top = deltas[0]
        what = top["key"].partition(":")[0]
        out += ["", f"{'Per decode step, the largest' if headline else 'Largest'}: "
                    f"{WHAT.get(what, what)} `{_label(top['key'])}`, "
                    f"{_kind_change(top)} per decode step."]
    else:
        out += ["", ("Per decode step, no" if headline else "No") +
                " kernel, host op or idle gap moved beyond the run-to-run spread."]
    out += [f"({doc['within_spread']} other numbers moved within the spread; not shown.)", "",
            f"![change per decode step]({doc['plot']})", "",
            "Raw traces (open in https://ui.perfetto.dev): " +
            ", ".join(f"`{p}`" for side in ("parent", "culprit") for p in doc["traces"][side]),
            "", "Environment of the two endpoints:", "", *env_lines(doc["environment"])]
    return out


def env_lines(doc: dict[str, Any]) -> list[str]:
    """The diff as Markdown lines (the CLI prints them; the report embeds them)."""
    out = []
    pkgs = doc.get("packages")
    if pkgs is None:
        out.append("- Packages: not compared (" + "; ".join(doc.get("notes") or ["unknown"]) + ")")
    elif not pkgs:
        out.append("- Packages: the same versions on both sides")
    else:
        out.append("- Packages that differ: " + ", ".join(
            f"`{c['name']}` {c['parent'] or '(absent)'} -> {c['culprit'] or '(absent)'}"
            for c in pkgs[:20]) + (f" (and {len(pkgs) - 20} more)" if len(pkgs) > 20 else ""))
    if doc.get("beyond_vllm"):
        out.append("- **The endpoints differ in more than vLLM itself** (" +
                   ", ".join(f"`{n}`" for n in doc["beyond_vllm"]) +
                   "): a dependency may explain the change; `vllm-bisect deps SESSION` tells a "
                   "dependency from vLLM code.")
    vars_ = doc.get("vllm_vars") or []
    out.append("- `VLLM_*` variables: " + (", ".join(
        f"`{c['name']}` {c['parent']} -> {c['culprit']}" for c in vars_) if vars_ else
        "the same on both sides"))
    torch = doc.get("torch") or {}
    if torch.get("parent") or torch.get("culprit"):
        out.append(f"- torch (its CUDA build after the +): parent {torch.get('parent')}, "
                   f"culprit {torch.get('culprit')}")
    gpu = doc.get("gpu") or {}
    if gpu.get("parent") or gpu.get("culprit"):
        out.append(f"- GPU: parent {gpu.get('parent')}, culprit {gpu.get('culprit')}")
    else:
        out.append("- GPU, driver, clocks: no nvidia-smi on this host")
    return out


class ExplainDoc(SectionDoc):
    """``explain``: the culprit's profile against its parent's (explain/run.py)."""

    culprit: str | None = None
    parent: str | None = None
    servers_per_side: int
    setups: dict[str, dict[str, Any]] | None = None
    server_starts: int | None = None
    servers_kept: int | None = None
    profiler: dict[str, str]
    segmentation: str
    steps: dict[str, list[Any]] | None = None
    tokens_per_step: dict[str, list[Any]] | None = None
    traces: dict[str, list[str]]
    totals: list[dict[str, Any]]
    deltas: list[dict[str, Any]]
    within_spread: int
    plot: str
    environment: dict[str, Any]


SECTION = StudySection("explain", ExplainDoc, explain_lines)
