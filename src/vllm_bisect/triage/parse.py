"""Turn a regression report (GitHub issue Markdown, English or Chinese) into a bisect spec.

Nothing in a report is ever executed: refs must look like hex shas or version tags, flags are
split with shlex and checked against an allowlist of shapes, JSON is parsed, not evaluated.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

SHA = r"[0-9a-f]{7,40}"
VERSION = r"\d+\.\d+\.\d+(?:rc\d+)?(?:\.dev\d+)?"
PATTERNS = (
    # 0.23.1rc1.dev471+ge312c5cb2
    re.compile(rf"\b(?P<version>{VERSION})\+g(?P<sha>{SHA})\b"),
    # 0.23.1rc1.dev471 (e312c5cb2)
    re.compile(rf"\b(?P<version>{VERSION})\s*\((?P<sha>{SHA})\)"),
    # 0.21.0+2325b6f0
    re.compile(rf"\b(?P<version>{VERSION})\+(?P<sha>{SHA})\b"),
    # commit URLs
    re.compile(rf"github\.com/vllm-project/vllm/commit/(?P<sha>{SHA})"),
    # "main 21c08ac4589", "commit e4294144a8ca..."
    re.compile(rf"(?:commit|main|sha|at)\s+`?(?P<sha>{SHA})`?\b", re.IGNORECASE),
    # v0.22.1 (a release tag)
    re.compile(r"(?<![\w.])(?P<tag>v\d+\.\d+\.\d+(?:rc\d+)?)\b"),
    # `e312c5cb2` in backticks
    re.compile(rf"`(?P<sha>{SHA})`"),
    # a full sha anywhere
    re.compile(r"\b(?P<sha>[0-9a-f]{40})\b"),
)
GOOD_WORDS = re.compile(r"✅|\bOK\b|\bgood\b|\bfast\b|\bworks\b|\bfine\b|\bnormal\b|\bbaseline\b|"
                        r"\bbefore\b|正常|好的|没问题|快", re.IGNORECASE)
BAD_WORDS = re.compile(r"❌|\bbad\b|regress\w*|\bslow\w*|\bbroken\b|\bbreaks?\b|\bcapped\b|"
                       r"\bafter\b|\bpre-fix\b|变慢|慢|异常|回归|坏|截断", re.IGNORECASE)
FIXED_BY = re.compile(r"fixed by (?:#|https://github\.com/vllm-project/vllm/pull/)(\d+)",
                      re.IGNORECASE)
MODEL = re.compile(r"\b((?:[A-Za-z0-9][\w.-]*)/(?:[A-Za-z0-9][\w.-]*?(?:\d+(?:\.\d+)?[BbMm]"
                   r"[\w.-]*|-[\w.-]+)))\b")
CAP = re.compile(r"(?:stops?|capped|cut off|truncated|exactly|只有|截断在|停在)\D{0,20}?(\d{2,5})"
                 r"\s*(?:output\s*)?(?:tokens?|个?token)", re.IGNORECASE)
ITL = re.compile(r"(?:ITL|TPOT|inter[- ]token latency|每token延迟)\D{0,30}?(\d+(?:\.\d+)?)\s*ms"
                 r"|(\d+(?:\.\d+)?)\s*ms\s*(?:ITL|TPOT)", re.IGNORECASE)
NUM = r"\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?"
TOKS = re.compile(rf"({NUM})\s*tok(?:ens)?/s", re.IGNORECASE)
VS_TOKS = re.compile(rf"({NUM})\s*(?:vs\.?|->|→)\s*({NUM})\s*tok(?:ens)?/s", re.IGNORECASE)
MS_CELL = re.compile(r"^~?(\d+(?:\.\d+)?)\s*ms$")
SPECULATIVE_WORD = re.compile(r"\bMTP\b|(?<![Nn]on-)(?<![Nn]on )\bspeculative\b|\beagle\b|"
                              r"\bngram\b", re.IGNORECASE)
K = re.compile(r"(?:K\s*=\s*|num_speculative_tokens\"?\s*[:=]\s*)(\d+)")
SPEC_CONFIG = re.compile(r"--speculative[-_]config\s+(['\"])(\{.*?\})\1")
SERVE_CMD = re.compile(r"vllm serve [^\n`]+")
BENCH_CMD = re.compile(r"vllm bench (serve|throughput)[^\n`]*")
ENV_VAR = re.compile(r"\b((?:VLLM|CUDA|TORCH|NCCL|TRITON|FLASHINFER)_[A-Z0-9_]+|CUTE_DSL_ARCH)"
                     r"=([\w.,:/-]+)")
TP = re.compile(r"\bTP\s*=\s*(\d+)|--tensor-parallel-size\s+(\d+)|-tp\s+(\d+)", re.IGNORECASE)
HARDWARE = (("GB10", re.compile(r"GB10|DGX Spark|sm_?121", re.IGNORECASE)),
            ("H200", re.compile(r"\bH200\b")), ("H100", re.compile(r"\bH100\b")),
            ("B200", re.compile(r"\bB200\b")), ("RTX 5090", re.compile(r"RTX ?5090")),
            ("A100", re.compile(r"\bA100\b")))
FLAG = re.compile(r"^--[a-z][a-z0-9-]*$")
SAFE_VALUE = re.compile(r"^[\w.,:/{}\[\]\"' =+-]*$")


@dataclass(frozen=True)
class Point:
    ref: str                    # sha (short or full), tag, or version as written
    version: str | None
    verdict: str | None         # "good" | "bad" | None
    line: int
    text: str


@dataclass
class Triage:
    good: str | None = None
    bad: str | None = None
    points: list[Point] = field(default_factory=list)
    symptom: str | None = None
    min_output_tokens: int | None = None
    itl_factor: float | None = None
    numbers: dict[str, list[float]] = field(default_factory=dict)
    model: str | None = None
    speculative: dict[str, Any] | None = None
    serve_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    benchmark: str | None = None
    fixed_by: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)


def _clause(line: str, start: int, end: int) -> tuple[str, int, int]:
    """The clause holding line[start:end], and the span's offsets inside it."""
    bounds = [i for i, ch in enumerate(line) if ch in ";|"] + \
             [m.start() for m in re.finditer(r"\.\s|,\s|\bbut\b|，|。|；", line)]
    left = max((b for b in bounds if b < start), default=-1)
    right = min((b for b in bounds if b >= end), default=len(line))
    return line[left + 1:right], start - left - 1, end - left - 1


def _nearest_verdict(text: str, start: int, end: int) -> str | None:
    """The good/bad marker closest to the ref in its clause (a tie decides nothing)."""
    found = []
    for verdict, pat in (("good", GOOD_WORDS), ("bad", BAD_WORDS)):
        for m in pat.finditer(text):
            gap = start - m.end() if m.end() <= start else max(0, m.start() - end)
            found.append((gap, verdict))
    if not found:
        return None
    found.sort()
    if len(found) > 1 and found[0][0] == found[1][0] and found[0][1] != found[1][1]:
        return None
    return found[0][1]


def table_ms(text: str) -> list[float]:
    """Millisecond values in table columns headed ITL or TPOT."""
    values: list[float] = []
    column: int | None = None
    for line in text.splitlines():
        if "|" not in line:
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        header = [i for i, c in enumerate(cells) if re.search(r"\b(ITL|TPOT)\b", c, re.I)]
        if header:
            column = header[0]
            continue
        if column is not None and column < len(cells):
            m = MS_CELL.match(cells[column])
            if m:
                values.append(float(m.group(1)))
    return values


def find_points(text: str) -> list[Point]:
    points: list[Point] = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        if re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", line):
            continue  # table rule
        for pat in PATTERNS:
            for m in pat.finditer(line):
                ref = m.groupdict().get("sha") or m.groupdict().get("tag")
                if not ref or ref in seen or (m.groupdict().get("sha") and ref.isdigit()):
                    continue
                if any(ref != p.ref and (p.ref.startswith(ref) or ref.startswith(p.ref))
                       for p in points):
                    continue
                seen.add(ref)
                # the marker nearest the ref in its clause decides ("X, fast); pre-fix Y is
                # slow"), else the nearest on its line (a table row's status cell)
                clause, a, b = _clause(line, m.start(), m.end())
                verdict = (_nearest_verdict(clause, a, b)
                           or _nearest_verdict(line, m.start(), m.end()))
                points.append(Point(ref=ref, version=m.groupdict().get("version"),
                                    verdict=verdict, line=n, text=line.strip()))
    return points


def _version_key(p: Point) -> Version | None:
    v = p.version or (p.ref[1:] if p.ref.startswith("v") else None)
    try:
        return Version(v) if v else None
    except InvalidVersion:
        return None


def choose_endpoints(t: Triage) -> None:
    goods = [p for p in t.points if p.verdict == "good"]
    bads = [p for p in t.points if p.verdict == "bad"]
    if goods and bads and all(_version_key(p) for p in goods + bads):
        latest_good = max(goods, key=lambda p: _version_key(p) or Version("0"))
        earliest_bad = min(bads, key=lambda p: _version_key(p) or Version("0"))
        if (_version_key(latest_good) or Version("0")) > (_version_key(earliest_bad)
                                                           or Version("0")):
            t.warnings.append(f"rows contradict each other: good {latest_good.ref} is newer "
                              f"than bad {earliest_bad.ref}")
        t.good, t.bad = latest_good.ref, earliest_bad.ref
    else:
        t.good = goods[-1].ref if goods else None
        t.bad = bads[0].ref if bads else None
    if t.good is None:
        t.unknowns.append("good: no commit or version marked good (pass --good)")
    if t.bad is None:
        t.unknowns.append("bad: no commit or version marked bad (pass --bad)")


def _floats(pattern: re.Pattern[str], text: str) -> list[float]:
    out = []
    for m in pattern.finditer(text):
        out += [float(g.replace(",", "")) for g in m.groups() if g]
    return out


def parse_symptoms(t: Triage, text: str) -> None:
    caps = [int(m.group(1)) for m in CAP.finditer(text)]
    itls = _floats(ITL, text) + table_ms(text)
    toks = _floats(VS_TOKS, text) or _floats(TOKS, text)
    t.numbers = {"cap_tokens": [float(c) for c in caps], "itl_ms": itls, "tok_s": toks}
    length = bool(caps)
    itl = len(itls) >= 2 or len(toks) >= 2
    if length and itl:
        t.symptom = "any"
    elif length:
        t.symptom = "length"
    elif itl:
        t.symptom = "itl"
    else:
        t.unknowns.append("symptom: no output cap, ITL or tok/s numbers found (pass "
                          "verdict.symptom)")
    if caps:
        t.min_output_tokens = max(caps) + 1  # a run reaching past the cap is good
    ratio = None
    if len(itls) >= 2 and min(itls) > 0:
        ratio = max(itls) / min(itls)
    elif len(toks) >= 2 and min(toks) > 0:
        ratio = max(toks) / min(toks)
    if ratio is not None and ratio > 1.05:
        t.itl_factor = round(max(1.05, math.sqrt(ratio)), 2)  # the geometric midpoint


def parse_serving(t: Triage, text: str) -> None:
    models = [m.group(1) for m in MODEL.finditer(text)
              if not m.group(1).startswith(("vllm-project/", "github.com"))]
    t.model = models[0] if models else None
    if t.model is None:
        t.unknowns.append("model: no Hugging Face model id found (pass serve.model)")
    m = SPEC_CONFIG.search(text)
    if m:
        try:
            cfg = json.loads(m.group(2))
            if isinstance(cfg, dict):
                t.speculative = {k: v for k, v in cfg.items()
                                 if isinstance(v, str | int | float | bool)}
        except json.JSONDecodeError:
            t.warnings.append(f"--speculative-config is not valid JSON: {m.group(2)[:80]}")
    if t.speculative is None and SPECULATIVE_WORD.search(text):
        k = K.search(text)
        method = "ngram" if re.search(r"\bngram\b", text, re.I) else "mtp"
        t.speculative = {"method": method, "num_speculative_tokens": int(k.group(1)) if k else 3}
        if not k:
            t.unknowns.append("speculative: K not stated, assumed 3")
    if t.speculative and str(t.speculative.get("method", "")).endswith("_mtp"):
        t.speculative["method"] = "mtp"  # vLLM rewrites qwen3_5_mtp, deepseek_mtp, ... to mtp
    cmd = SERVE_CMD.search(text)
    if cmd:
        t.serve_args = safe_args(cmd.group(0), t)
    t.env = {k: v for k, v in ENV_VAR.findall(text)}
    hw = next((name for name, pat in HARDWARE if pat.search(text)), None)
    tp = TP.search(text)
    t.hardware = {"gpu": hw, "tensor_parallel": int(next(g for g in tp.groups() if g))
                  if tp else 1}
    if hw == "GB10" or re.search(r"aarch64|arm64|Grace", text, re.I):
        t.hardware.update(arch="aarch64", docker_platform="linux/arm64")
    if re.search(r"CUDA 13|cu130", text, re.I):
        t.hardware["variant"] = "cu130"
    if hw is None:
        t.unknowns.append("hardware: no GPU named (the bisect runs on the machine you use)")
    bench = BENCH_CMD.search(text)
    if bench:
        t.benchmark = bench.group(0).strip()
        t.warnings.append(f"report uses `vllm bench {bench.group(1)}`: the decode probe measures "
                          "per-token ITL and output length; a throughput probe is not built yet")
    t.fixed_by = FIXED_BY.findall(text)


def safe_args(cmd: str, t: Triage) -> list[str]:
    """`vllm serve MODEL --flag value ...` -> the flags after the model, validated."""
    try:
        words = shlex.split(cmd)
    except ValueError as err:
        t.warnings.append(f"cannot split the serve command ({err}); flags ignored")
        return []
    args = words[3:]  # vllm serve MODEL
    out: list[str] = []
    i = 0
    while i < len(args):
        flag = args[i]
        if not FLAG.match(flag) or flag == "--speculative-config":
            i += 2 if flag == "--speculative-config" else 1
            continue
        out.append(flag)
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            if not SAFE_VALUE.match(args[i + 1]):
                t.warnings.append(f"dropped {flag}: its value has unexpected characters")
                out.pop()
            else:
                out.append(args[i + 1])
            i += 1
        i += 1
    if "--port" in out:
        j = out.index("--port")
        del out[j:j + 2]  # vllm-bisect picks the port
    return out


def triage(text: str) -> Triage:
    text = text.replace("\\\n", " ")  # shell line continuations
    t = Triage(points=find_points(text))
    choose_endpoints(t)
    parse_symptoms(t, text)
    parse_serving(t, text)
    return t
