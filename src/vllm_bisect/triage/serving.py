"""How the reporter ran it: model, `vllm serve` flags, `vllm bench` command, speculative config,
hardware, env vars (and an env var the report flips between runs), the PR that fixed it.

Nothing here is executed: commands are split with shlex, flags checked against an allowlist of
shapes, JSON parsed, never evaluated.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from vllm_bisect.triage.argv import SERVER_START, server_command
from vllm_bisect.triage.fix_words import fix_prs
from vllm_bisect.triage.names import URL, hardware, org_less_model

HUB_ID = re.compile(r"(?<![\w./:@~-])(?P<id>[A-Za-z][\w-]{1,60}/[A-Za-z0-9][\w.-]{1,120})"
                    r"(?![\w/:@-])")
NOT_MODEL_ORG = re.compile(r"^(?:vllm-project|sgl-project|NVIDIA-NeMo|vllm|lmsysorg|nvcr|docker|"
                           r"user-attachments|actions|datasets|critic|perf|github|HF-[\w-]+|"
                           r"HTTPS?|TCP|UDP|BF16|FP16|FP32|FP8|INT[48]|W[48]A(?:8|16)|N?V?FP4|"
                           r"MXFP4|AWQ|GPTQ|TP\d{0,2}|DP\d{0,2})$",
                           re.IGNORECASE)
GPU = re.compile(r"\b(?:NVIDIA\s{1,3})?(?P<gpu>GB10|GB200|GB300|GH200|H20|H100|H200|H800|B200|B300|"
                 r"A100|A10G|A800|L40S|L20|L4|T4|V100|MI300X|MI325X|MI350X|MI355X|RTX\s?[345]090|"
                 r"(?<![\w.])[345]090|DGX Spark|910B)(?:\b|(?=x\d))|"
                 r"(?<![A-Za-z0-9])(?P<ascend>A[23])(?![A-Za-z0-9])",
                 re.IGNORECASE)
MODEL_FLAG = re.compile(r"""(?:--model[-_](?:path|dir)|--model|\bmodel_id|\bmodel|pretrained)"""
                        r"""["']?\s{0,3}[=:,]?\s{0,3}["']?(?P<v>[^\s"',)\]]{2,200})""")
BENCH_CMD = re.compile(r"\bvllm\s{1,3}bench\s{1,3}(?P<kind>serve|throughput|latency)\b[^\n`]{0,2000}")
SPEC_JSON = re.compile(r"--speculative[-_]config\s{1,3}(['\"])(?P<json>\{[^\n]{1,500}?\})\1")
NON_SPEC = re.compile(r"\bnon-?spec(?:ulative)?\b|非投机|\bspec(?:ulative decoding)?\s{1,3}off\b|"
                      r"no\s{1,3}speculative\s{1,3}config|without\s{1,3}speculative|"
                      r"speculative_config\s{0,2}=\s{0,2}None", re.IGNORECASE)
SPEC_WORD = re.compile(r"\bMTP\b|\bspeculative\b|\beagle3?\b|\bngram\b|投机", re.IGNORECASE)
K_PATTERNS = re.compile(r"num_speculative_tokens[\"']?\s{0,3}[:=]\s{0,3}(?P<a>\d{1,2})|"
                        r"num_nextn_predict_layers\s{0,3}[:=]\s{0,3}(?P<b>\d{1,2})|"
                        r"\bK\s{0,2}=\s{0,2}(?P<c>\d{1,2})\b|MTP depth[^\d\n]{0,20}(?P<d>\d{1,2})",
                        re.IGNORECASE)
ENV = re.compile(r"\b(?P<k>(?:VLLM|CUDA|TORCH|NCCL|TRITON|FLASHINFER|HF|ASCEND|HCCL|SGLANG)_[A-Z0-9_]{1,60}|"
                 r"CUTE_DSL_ARCH|TASK_QUEUE_ENABLE)=(?P<v>[\w.,:/-]{1,120})")
FIXED_BY = re.compile(r"(?:fixed|resolved|addressed)\s{1,3}(?:by|in|via)\s{1,3}(?:PR\s{0,2})?"
                      r"(?:#|https://github\.com/[\w.-]{1,60}/[\w.-]{1,60}/pull/)(?P<pr>\d{1,7})|"
                      r"修复[:：]?\s{0,2}#(?P<zh>\d{1,7})|已由\s{0,2}#(?P<zh2>\d{1,7})\s{0,2}修复|"
                      r"(?:\bPR|pull request)\s{0,2}#(?P<pr2>\d{1,7})\s{1,3}(?:fixes|fixed|resolves)|"
                      r"修复\S{0,8}\s{0,3}commit\s{0,2}[0-9a-f]{7,40}\s{0,3}[（(]#(?P<zh3>\d{1,7})[)）]|"
                      # a fix named by its commit: "It has been fixed by https://github.com/o/r/commit/<sha>"
                      r"(?:fixed|resolved|addressed)\s{1,3}(?:by|in|via)\s{1,3}(?:commit\s{1,3})?"
                      r"https://github\.com/[\w.-]{1,60}/[\w.-]{1,60}/commit/(?P<sha>[0-9a-f]{7,40})",
                      re.IGNORECASE)
TP = re.compile(r"(?:--tensor[-_]parallel[-_]size|-tp|--tp(?:_size)?)[=\s]{1,3}(?P<a>\d{1,2})\b"
                r"|\bTP\s{0,2}[=:]?\s{0,2}(?P<b>\d{1,2})\b", re.IGNORECASE)
FLAG = re.compile(r"^--[a-z][a-z0-9-]{0,60}$")
GENERIC_DIR = re.compile(r"^(?:models?|weights|ckpts?|checkpoints?|hf|data|model_path|\.)$",
                         re.IGNORECASE)
SAFE_VALUE = re.compile(r"^[\w.,:/{}\[\]\"' =+-]{0,500}$")
DATASET_FLAGS = ("--dataset-name", "--dataset-path", "--num-prompts", "--input-len", "--output-len",
                 "--random-input-len", "--random-output-len", "--prefix-len", "--hf-split",
                 "--hf-subset", "--sharegpt-output-len", "--async-engine", "--backend",
                 "--max-num-batched-tokens", "--max-concurrency", "--request-rate",
                 "--prefix-repetition-prefix-len", "--prefix-repetition-suffix-len",
                 "--prefix-repetition-num-prefixes", "--prefix-repetition-output-len")
NO_VALUE = ("--async-engine", "--trust-remote-code", "--enforce-eager", "--ignore-eos")


@dataclass
class Serving:
    model: str | None = None
    model_line: int | None = None
    local_model: str | None = None   # a filesystem path: not a hub id
    serve_args: list[str] = field(default_factory=list)
    serve_line: int | None = None
    bench_kind: str | None = None
    bench_args: list[str] = field(default_factory=list)
    bench_command: str | None = None
    bench_line: int | None = None
    speculative: dict[str, Any] | None = None
    speculative_why: str | None = None
    speculative_said: str | None = None   # the method as the report wrote it
    speculative_exact: bool = False       # from a --speculative-config (JSON or dotted)
    serve_how: str | None = None          # "vllm serve", "docker run <image>", ...
    hardware: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    env_flips: dict[str, list[str]] = field(default_factory=dict)
    fixed_by: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    model_org_less: bool = False     # a model named without its org ("gemma 3 4b")


def _split(cmd: str, s: Serving) -> list[str]:
    try:
        return shlex.split(cmd)
    except ValueError as err:
        s.warnings.append(f"cannot split {cmd[:40]!r}... ({err}); its flags are ignored")
        return []


def _model_value(v: str) -> tuple[str | None, str | None]:
    """(hub id, local path) for a model argument."""
    v = v.strip().rstrip(".,;")
    if not v or "$" in v or v.startswith("<"):
        return None, None
    if v.startswith(("/", "./", "~", "../")) or re.match(r"^[A-Za-z]:\\", v):
        # a generic folder ("/work/models") names where weights are, not which
        return (None, None) if GENERIC_DIR.match(v.rstrip("/").rsplit("/", 1)[-1]) else (None, v)
    if HUB_ID.fullmatch(v) and GENERIC_DIR.match(v.split("/")[0]):
        return None, v  # "models/Qwen3-32B-FP8": a folder under the working directory, no org
    if (HUB_ID.fullmatch(v) and not NOT_MODEL_ORG.match(v.split("/")[0])
            and re.search(r"[A-Za-z]", v.split("/")[1])):
        return v, None
    return None, None


def safe_flags(words: list[str], s: Serving, keep: tuple[str, ...] | None = None) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(words):
        flag = words[i]
        has_value = i + 1 < len(words) and not words[i + 1].startswith("--") and flag not in NO_VALUE
        if not FLAG.match(flag) or flag in ("--speculative-config", "--speculative_config",
                                            "--port", "--host", "--model"):
            i += 2 if has_value and FLAG.match(flag) else 1
            continue
        if keep is not None and flag not in keep:
            i += 2 if has_value else 1
            continue
        if has_value and not SAFE_VALUE.match(words[i + 1]):
            s.warnings.append(f"dropped {flag}: its value has unexpected characters")
            i += 2
            continue
        out.append(flag)
        if has_value:
            out.append(words[i + 1])
            i += 1
        i += 1
    return out


def _speculative(text: str, s: Serving, dotted: Any = None) -> None:
    if NON_SPEC.search(text):
        m = NON_SPEC.search(text)
        s.speculative_why = f"{m.group(0)!r}: no speculative config" if m else None
        return
    m = SPEC_JSON.search(text)
    if isinstance(dotted, dict) and dotted:   # vLLM's dotted form: the serve line's own keys
        s.speculative = {k: v for k, v in dotted.items() if isinstance(v, str | int | float | bool)}
        s.speculative_why = ("--speculative-config." + " --speculative-config.".join(
            f"{k} {v}" for k, v in s.speculative.items()) + " (vLLM's dotted form)")
        s.speculative_exact = m is None   # both forms: which the reporter meant is a guess
        if m:
            s.speculative_why += "; the JSON form is given too"
            s.warnings.append("the serve command gives --speculative-config both as JSON and "
                              "in the dotted form: vLLM uses the dotted keys (given last)")
    elif m:
        try:
            cfg = json.loads(m.group("json"))
        except json.JSONDecodeError:
            s.warnings.append(f"--speculative-config is not valid JSON: {m.group('json')[:80]}")
            cfg = None
        if isinstance(cfg, dict):
            s.speculative = {k: v for k, v in cfg.items() if isinstance(v, str | int | float | bool)}
            s.speculative_why = "--speculative-config"
            s.speculative_exact = True
    if s.speculative is None and SPEC_WORD.search(text):
        k = K_PATTERNS.search(text)
        method = "ngram" if re.search(r"\bngram\b", text, re.I) else (
            "eagle" if re.search(r"\beagle", text, re.I) else "mtp")
        value = next((g for g in (k.groups() if k else ()) if g), None)
        s.speculative = {"method": method, "num_speculative_tokens": int(value) if value else 3}
        s.speculative_why = (f"{SPEC_WORD.search(text).group(0)!r} in the text"  # type: ignore[union-attr]
                             + ("" if value else "; K not stated, assumed 3"))
    if s.speculative and str(s.speculative.get("method", "")).lower().endswith("mtp"):
        s.speculative_said = str(s.speculative.get("method"))
        s.speculative["method"] = "mtp"  # vLLM rewrites qwen3_5_mtp, deepseek_mtp, ... to mtp


def _tensor_parallel(text: str, s: Serving) -> int:
    """The tensor parallel size: the serve command's flag, else the first one named. Two
    different sizes are a conflict the reading says (a warning), never a silent choice."""
    said = [(int(next(g for g in m.groups() if g)), re.sub(r"\s+", " ", m.group(0).strip()))
            for m in TP.finditer(text)]
    serve_tp = [int(s.serve_args[i + 1]) for i, a in enumerate(s.serve_args[:-1])
                if a == "--tensor-parallel-size" and s.serve_args[i + 1].isdigit()]
    chosen = (serve_tp or [v for v, _ in said] or [1])[0]
    others = list(dict.fromkeys(w for v, w in said if v != chosen))
    if others:
        s.warnings.append(
            f"tensor parallel: the report writes {', '.join(repr(w) for w in others)} but "
            + (f"its serve command runs --tensor-parallel-size {chosen}: the spec follows the "
               "serve command" if serve_tp else f"also TP={chosen}: the spec follows the first "
               f"named ({chosen})") + "; check which one ran (serve.args, "
            "parallel.gpus_per_probe)")
    return chosen


def logical_lines(lines: list[str]) -> list[tuple[int, str]]:
    """Lines with shell continuations joined, each with the number of its first line."""
    out: list[tuple[int, str]] = []
    start, buf = 0, ""
    for n, line in enumerate(lines, 1):
        if not buf:
            start = n
        if line.rstrip().endswith("\\") and len(buf) < 8000:
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def find_serving(lines: list[str]) -> Serving:
    s = Serving()
    text = "\n".join(lines)
    dotted: Any = None
    for n, line in logical_lines(lines):
        start = SERVER_START.search(line)
        server = server_command(_split(start.group(0), s)) if start and s.serve_line is None \
            else None
        if server is not None and (server.model or server.args):
            s.serve_line, s.serve_how = n, server.how
            hub, local = _model_value(server.model or "")
            if hub or local:
                s.model, s.local_model, s.model_line = hub, local, n
            s.serve_args = safe_flags(server.args, s)
            for flag, value in server.dotted.items():   # the other dotted flags, as JSON
                if flag not in ("speculative-config",):
                    s.serve_args += safe_flags([f"--{flag}", json.dumps(value)], s)
            dotted = server.dotted.get("speculative-config")
            s.warnings += server.notes
        bench = BENCH_CMD.search(line)
        if bench and s.bench_line is None:
            s.bench_kind, s.bench_line = bench.group("kind"), n
            s.bench_command = bench.group(0).strip()
            words = _split(bench.group(0), s)
            s.bench_args = safe_flags(words[3:], s, keep=DATASET_FLAGS)
    if s.model is None and s.local_model is None:
        for n, line in enumerate(lines, 1):
            if "--dataset" in line and "--model" not in line:
                continue
            for m in MODEL_FLAG.finditer(line):
                hub, local = _model_value(m.group("v"))
                if hub or local:
                    s.model, s.local_model, s.model_line = hub, local, n
                    break
                # "--model Qwen2.5-1.5B-Instruct": the served name without its org is the model
                if m.group(0).startswith("--model") and (named := org_less_model(
                        [m.group("v").strip("'\"")])) and named[0] == m.group("v").strip("'\""):
                    s.model, s.model_line, s.model_org_less = named[0], n, True
                    break
            if s.model_line:
                break
    if s.model is None and s.local_model is None:
        for n, line in enumerate(lines, 1):
            if re.search(r"--dataset|datasets/", line):
                continue
            for m in HUB_ID.finditer(re.sub(r"https?://\S{1,2000}", " ", line)):
                org, name = m.group("id").split("/", 1)
                if (NOT_MODEL_ORG.match(org) or not re.search(r"\d", name) or GPU.fullmatch(org)
                        or not re.search(r"[A-Za-z]", name)):
                    continue
                s.model, s.model_line = m.group("id").rstrip("."), n
                break
            if s.model:
                break
    if s.model is None and s.local_model is None and (named := org_less_model(lines)):
        s.model, s.model_line, s.model_org_less = named[0], named[1], True
    _speculative(text, s, dotted)
    text = URL.sub(" ", text)  # a repository's name in a URL is not the reporter's hardware
    # "4x3090s", "8xH100", "2x A100s": a count and a plural around the name
    text = re.sub(r"(?<![\w.])(\d{1,2})\s?[x×]\s?(?=[A-Z0-9])", r"\1 x ", text)
    text = re.sub(r"(?<=\d0)s\b|(?<=\d0)'s\b", "", text)
    gpu = GPU.search(text)
    if gpu and gpu.group("ascend") and not re.search(r"ascend|npu|cann|昇腾", text, re.I):
        gpu = next((g for g in GPU.finditer(text) if g.group("gpu")), None)
    name = None
    if gpu:
        name = gpu.group("gpu") or f"Ascend {gpu.group('ascend')}"
        name = re.sub(r"^(?:RTX\s?)?([345]090)$", r"RTX \1", name, flags=re.I)
        name = "GB10" if name.lower() == "dgx spark" else name
    s.hardware = {"gpu": name or hardware(text), "tensor_parallel": _tensor_parallel(text, s)}
    if name == "GB10" or re.search(r"aarch64|arm64|\bGrace\b", text, re.I):
        s.hardware.update(arch="aarch64", docker_platform="linux/arm64")
    if (name or "").upper().startswith("MI") or re.search(
            r"\bROCm\b|\bAMD\s{1,3}Instinct\b|\bgfx9[45]\d\b|vllm-openai-rocm|rocm/vllm", text, re.I):
        s.hardware["platform"] = "rocm"
    if re.search(r"CUDA\s{0,2}13|cu130", text, re.I):
        s.hardware["variant"] = "cu130"
    for m in ENV.finditer(text):
        values = s.env_flips.setdefault(m.group("k"), [])
        if m.group("v") not in values:
            values.append(m.group("v"))
        s.env.setdefault(m.group("k"), m.group("v"))
    s.env_flips = {k: v for k, v in s.env_flips.items() if len(v) >= 2}
    # the fix PR is read from the text with its URLs ("fixed in https://github.com/o/r/pull/N"):
    # the URLs were blanked above only for the hardware search
    for m in FIXED_BY.finditer("\n".join(lines)):
        pr = next(g for g in (m.group(k) for k in ("pr", "zh", "zh2", "pr2", "zh3", "sha")) if g)
        if pr not in s.fixed_by:
            s.fixed_by.append(pr)
    s.fixed_by += [pr for pr in fix_prs("\n".join(lines)) if pr not in s.fixed_by]
    return s
