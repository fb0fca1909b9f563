"""Refs a report names: release versions, dev/nightly strings, commit shas, docker image tags.

A sha is taken only where it looks like a commit: a commit URL, a ``+g<sha>`` version, a sha in
parentheses right after a version or a nightly, a backticked sha, a labelled sha ("commit",
"commit id:", "main", "nightly-", "build"), or a full 40-hex word outside any URL. Anything
inside another URL (images, assets, dashboards, CI runs) is ignored. Versions named after
another package (torch 2.11.0, Transformers==4.54.1, CUDA 13.0, driver 570.172.08) are not refs.
All patterns are linear: no nested quantifiers, every repetition bounded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from packaging.version import InvalidVersion, Version

MAX_LINE = 4000
MAX_MENTIONS = 1000  # a report names a handful of refs; more is noise (or an attack)
URL = re.compile(r"https?://[^\s)\]>\"'`]{1,2000}")
COMMIT_URL = re.compile(r"github\.com/[\w.-]{1,100}/[\w.-]{1,100}/commit/([0-9a-f]{7,40})\b")
COMPARE_URL = re.compile(r"github\.com/[\w.-]{1,100}/[\w.-]{1,100}/compare/([0-9a-f]{7,40})\.{2,3}"
                         r"([0-9a-f]{7,40})\b")
# 0.23.1rc1.dev601+ga16dbd5b8, v0.26.0, 0.9.0.1, v0.18, 1.2.0rc2, 0.6.1.post2
VERSION = re.compile(
    r"(?:(?<![A-Za-z0-9_.+])|(?<=vllm)|(?<=vLLM)|(?<=VLLM))(?P<v>[vV])?(?P<num>\d{1,3}(?:\.\d{1,4}){1,3})"
    # a/b pre-releases glued or after "."; rc in any case, also after "-" ("-a3" after a version
    # is a hardware tag, Ascend A3: v0.11.0-a3 is the 0.11.0 release built for A3)
    r"(?P<pre>(?:\.?[ab]|[.-]?(?:rc|RC|Rc))\d{1,3})?(?P<post>[.-]?post\d{1,3})?(?P<dev>\.dev\d{1,6})?"
    r"(?P<local>\+g?[0-9a-f]{7,40}(?![0-9a-z])|\+[A-Za-z0-9_.]{1,40})?")
LABELLED_SHA = re.compile(
    r"(?:\bcommit(?:\s+id)?|\bsha|\bmain|\bnightly|\bnightlies|\bbuild|\bbuilt\s+from|\brevision|"
    r"\bhead|\bHEAD|提交|\bfrom|\bsince|\bafter|\bbefore|\bat|\buntil|"
    # a reporter's own bisect: "bisected it to X", "git bisect points to X", "the culprit is X"
    r"\bbisect\w{0,3}(?:\s{1,3}(?:it|this|the\s{1,3}\w{1,12}))?\s{1,3}(?:down\s{1,3})?to|"
    r"\bpoints?\s{1,3}to|\bculprit(?:\s{1,3}(?:is|was))?)(?:\s{0,2}(?:参考|参见|即|为|是))?"
    r"\s{0,3}[:=]?\s{0,3}[(（]?\s{0,2}`?"
    r"(?P<sha>[0-9a-f]{7,40})(?![\w/-])(?!\.\w)")
NIGHTLY_TAG = re.compile(r"nightly-(?P<sha>[0-9a-f]{7,40})\b")
PAREN_SHA = re.compile(r"\s{0,3}[(（]\s{0,2}(?:commit(?:\s+id)?\s{0,2}[:=]?\s{0,2})?`?"
                       r"(?P<sha>[0-9a-f]{7,40})`?\s{0,2}[)）,，]")
BACKTICK_SHA = re.compile(r"`(?P<sha>[0-9a-f]{7,40})`")
FULL_SHA = re.compile(r"(?<![\w/.-])(?P<sha>[0-9a-f]{40})(?![\w/.-])")
DOCKER = re.compile(r"(?P<image>(?:[\w.-]{1,60}/){0,3}(?:vllm-openai(?:-rocm)?|vllm-ascend|sglang|"
                    r"tensorrt-llm/release|vllm-release-repo|vllm-ci-postmerge-repo)):"
                    r"(?P<tag>[\w.+-]{1,80})")
# a per-commit wheel: wheels.vllm.ai/<commit>/..., the S3 bucket behind it, or a wheel file
# whose local version names the commit (vllm-0.11.1rc3.dev12+g1a2b3c4d5-..., "+" as %2B)
WHEEL_HOST = re.compile(r"https?://(?:wheels\.vllm\.ai|vllm-wheels\.s3[\w.-]{0,40}\.amazonaws\.com)"
                        r"(?:/[\w.%+-]{1,200}){0,6}?/(?P<sha>[0-9a-f]{7,40})(?=/|$)")
WHEEL_FILE = re.compile(r"/vllm-(?P<ver>\d{1,3}(?:\.\d{1,4}){1,3}(?:rc\d{1,3})?(?:\.post\d{1,3})?"
                        r"(?:\.dev\d{1,6})?)(?:\+|%2[Bb])g(?P<sha>[0-9a-f]{7,40})(?:\.d\d{8})?-")
# a number with a unit is a measurement ("TPOT 7.9 ms -> 9.6 ms"), never a version
UNIT = (r"\s{0,2}(?:ms|s|sec|secs|seconds|us|µs|tok/s|tokens?/s|t/s|tps|req/s|rps|qps|%|GB|GiB|"
        r"MB|MiB|tokens?|倍|毫秒|秒)(?![A-Za-z0-9])")
MEASURED = re.compile(UNIT, re.IGNORECASE)
ARROW_TO_MEASURED = re.compile(r"\s{0,2}(?:->|→|=>|到|to)\s{0,2}\d{1,5}(?:\.\d{1,4})?" + UNIT,
                               re.IGNORECASE)
# "从0.11升级到0.13": an upgrade arrow makes a two-part number a version (of the product)
UPGRADE_ARROW = re.compile(r"(?:从|升级到|升级至|→|->|=>)\s{0,2}[vV]?$")
UPGRADE_ARROW_AFTER = re.compile(r"\s{0,2}(?:升级到|升级至|到|→|->|=>)\s{0,2}[vV]?\d")
# a version right after one of these words belongs to another package
OTHER_PACKAGE = re.compile(  # a whole word: "Ollama 0.12.7" is not llama's version
    r"(?<![A-Za-z])(?:torch|pytorch|transformers|cuda|cudnn|driver|python|triton|flashinfer|cann|lm_eval|"
    r"lm-eval|nccl|gcc|glibc|libc|ubuntu|centos|rocm|hip|aiter|mlx-vlm|mlx|numpy|xformers|"
    r"tokenizers|cmake|clang|nvcc|kernel|firmware|cc|sm|compute capability|jax|tensorrt(?!-llm)|"
    r"ray|pydantic|fastapi|openai|accelerate|deepspeed|megatron|verl|os|debian|rhel|qwen|llama|"
    r"mistral|gemma|glm|deepseek|phi|kimi|minimax|nemotron|torch_npu|torchvision|ascend-cann|"
    r"mooncake|nixl|lmcache|ucx|pyzmq|safetensors|huggingface|hf)"
    # "transformers 版本 4.57.6": 版本 is "version"
    r"(?:[\s_]{0,3}(?:version|版本))?[\s:=_v-]{0,24}$", re.IGNORECASE)
OUR_PRODUCT = re.compile(r"(?:vllm|vllm-ascend|vllm-omni|sglang|trtllm|tensorrt-llm|trt-llm|"
                         r"version|release|tag|image|wheel|nightly|rocm)[\s:=/_-]{0,3}(?:==?|-)?$",
                         re.IGNORECASE)


# "main" as the branch: after a preposition ("on main", "than the latest main"), at the start of
# a clause or cell ("main is 20% slower", "| main |"), or as "main branch"; and followed by
# punctuation or a verb/adverb, never by a noun ("the main issue", "main process")
MAIN_REF = re.compile(
    r"(?:\b(?:on|with|from|to|at|than|vs\.?|and|in|using|of|or|against|between)\s{1,3}"
    r"(?:the\s{1,3})?(?:(?:latest|current|recent|today'?s)\s{1,3})?|^\W{0,3}|[(\[`*|]\s{0,2}|"
    r"\b(?:latest|current)\s{1,3})(?P<main>main)(?:\s{1,3}branch)?(?![\w-])"
    r"(?=\s{0,2}(?:[.,;:!?)\]`*|，。、]|$)|\s{1,3}(?:is|was|has|works?|worked|fails?|failed|"
    r"crash\w{0,2}|hangs?|too|now|still|also|branch|build|head|returns?|produces?|gives?|"
    r"and|vs\.?|or)\b)", re.IGNORECASE)


# an environment line ("GCC version: (Ubuntu 11.4.0-1ubuntu1) 11.4.0", "[pip3] flashinfer-python==
# 0.2.5", "- **PyTorch Version:** 2.2.0", collect_env output) names its key's version: a ref
# only when the key is our product ("vLLM Version: 0.10.1.1", "[pip3] vllm==0.10.1")
ENV_LINE = re.compile(
    r"^\W{0,8}(?:\[(?:pip\d?|conda)\]\s{1,3}(?P<pkg>[\w.-]{1,60})|"
    # "Last good version: 0.9.2" names a role, not a tool
    r"(?![^:\n]{0,50}\b(?:good|bad|last|first|working|broken|old|new|previous|current|affected|"
    r"fixed|tested|problem|regress\w{0,5}|before|after|our|my|the)\b)(?P<key>[A-Za-z][\w .+/()-]{0,50}?"
    r"\s(?:version|Version|VERSION)|OS|PyTorch|CUDA|cuDNN|GCC|Clang|CMake|Libc|Python|ROCM|HIP))"
    r"\W{0,4}\s{0,3}(?::|==)"
    # a `pip list` / `conda list` row ("nvidia-nccl-cu12   2.21.5") or a requirement line
    # ("transformers==4.54.1"): the package's own version (a role word is not a package)
    r"|^\s{0,4}(?!(?:before|after|good|bad|old|new|baseline|control|treatment|main|nightly|"
    r"version|release|commit|tag)\b)(?P<row>[A-Za-z][\w.-]{1,60})(?:\s{2,}v?\d|\s{0,2}(?:==|>=|<=|~=))",
    re.IGNORECASE)
OURS_KEY = re.compile(r"vllm|sglang", re.IGNORECASE)


@dataclass(frozen=True)
class Mention:
    """One ref as written: a version (maybe with its sha), a sha, or both."""

    version: str | None      # PEP 440 text without a leading v, e.g. "0.23.1rc1.dev601"
    sha: str | None          # hex as written (short or full)
    image: str | None        # a docker image reference it came from
    line: int                # 1-based
    start: int               # offsets in the line
    end: int
    how: str                 # "version", "+g", "commit-url", "labelled", "backticks", ...
    name: str | None = None  # a symbolic ref: "main" (the branch's head when the bisect runs)

    @property
    def label(self) -> str:
        if self.version and self.sha:
            return f"{self.version} ({self.sha[:12]})"
        return self.sha or self.tag or "?"

    @property
    def tag(self) -> str | None:
        return f"v{self.version}" if self.version else None


@lru_cache(maxsize=4096)
def version_key(version: str | None) -> Version | None:
    if not version:
        return None
    try:
        return Version(version)
    except InvalidVersion:
        return None


def _url_spans(line: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in URL.finditer(line)]


def _inside(spans: list[tuple[int, int]], pos: int) -> bool:
    return any(a <= pos < b for a, b in spans)


def _is_sha(s: str) -> bool:
    return any(c.isdigit() for c in s) and any(c.isalpha() for c in s)


def _version_ok(line: str, m: re.Match[str]) -> str | None:
    """The PEP 440 text of a version match, or None when it is not a ref of ours."""
    num = m.group("num")
    parts = num.split(".")
    before = line[max(0, m.start() - 40):m.start()]
    ours = bool(m.group("v")) or bool(OUR_PRODUCT.search(before))
    after = line[m.end():m.end() + 4]
    if re.match(r"\.[xX](?![\w.])", after) and len(parts) == 2 and (m.group("v") or ours) \
            and not m.group("pre") and not m.group("dev"):
        return num + ".0"  # "on v0.11.x": the family's first release is the first of it seen
    if re.match(r"\.[*xX]|-dev|-[A-Za-z]{0,3}\d*\.\d", after):
        return None  # 0.9.*, v0.11.0-dev: a family or a branch, not a ref
    if re.match(r"[A-Za-z0-9_]|\.\d", after):
        return None  # 1.2.3x, 1.2.3.4.5: part of a longer word
    if m.start() > 0 and line[m.start() - 1] == "-" and not re.search(
            r"(?:vllm|sglang|ascend|release)-$", line[max(0, m.start() - 12):m.start()], re.I):
        return None  # Qwen3-32B-..., 6.8.0-38-generic
    if OTHER_PACKAGE.search(before) and not m.group("v"):
        return None
    if int(parts[0]) > 99 or all(p == "0" for p in parts):
        return None  # driver versions, 0.0.0.0
    if line[m.end():m.end() + 1] == ":" and line[m.end() + 1:m.end() + 2].isdigit():
        return None  # host:port
    if len(parts) == 2 and not m.group("v") and not m.group("dev") and (
            MEASURED.match(line, m.end()) or ARROW_TO_MEASURED.match(line, m.end())):
        return None  # "7.9 ms -> 9.6 ms": two measurements, not two versions
    if len(parts) == 2 and not ours and not m.group("dev") and not UPGRADE_ARROW.search(
            before[-8:]) and not UPGRADE_ARROW_AFTER.match(line[m.end():m.end() + 8]):
        return None  # "3.2", "13.0": too weak without a v, a product name, a .devN or an arrow
    if len(parts) == 4 and not ours and parts[0] != "0":
        return None  # 0.9.0.1 is a version (no IP address starts at 0); 10.0.0.1 is not
    # 0.17.1.rc1, 0.4.0post1 and v0.6.3-post1 are spelled loosely (PEP 440 allows "." and
    # "-" as separators): written as PEP 440 spells them
    text = (num + (m.group("pre") or "").lstrip(".-").lower()
            + (("." + m.group("post").lstrip(".-")) if m.group("post") else "")
            + (m.group("dev") or ""))
    return text if version_key(text) is not None else None


def find_mentions(lines: list[str]) -> list[Mention]:
    out: list[Mention] = []
    for n, raw in enumerate(lines, 1):
        line = raw[:MAX_LINE]
        urls = _url_spans(line)
        taken: list[tuple[int, int]] = []

        def add(version: str | None, sha: str | None, a: int, b: int, how: str,
                image: str | None = None, n: int = n, taken: list[tuple[int, int]] = taken,
                name: str | None = None) -> None:
            if any(x < b and a < y for x, y in taken):
                return
            taken.append((a, b))
            out.append(Mention(version, sha, image, n, a, b, how, name))

        for m in COMMIT_URL.finditer(line):
            start = next((a for a, b in urls if a <= m.start() < b), m.start())
            add(None, m.group(1), start, m.end(), "commit-url")
        for a, b in urls:   # a per-commit wheel's URL names its commit (and its version)
            url = line[a:b]
            host, file = WHEEL_HOST.match(url), WHEEL_FILE.search(url)
            sha = (host.group("sha") if host and _is_sha(host.group("sha")) else None) or (
                file.group("sha") if file else None)
            if sha:
                add(file.group("ver") if file else None, sha, a, b, "wheel-url")
        for m in COMPARE_URL.finditer(line):
            add(None, m.group(1), m.start(1), m.end(1), "compare-url")
            add(None, m.group(2), m.start(2), m.end(2), "compare-url")
        for m in DOCKER.finditer(line):
            if _inside(urls, m.start()):
                continue
            tag, image = m.group("tag"), f"{m.group('image')}:{m.group('tag')}"
            nightly = NIGHTLY_TAG.search(tag)
            vm = VERSION.match(tag)
            sha_tag = re.fullmatch(r"(?:sha-)?([0-9a-f]{7,40})", tag)
            if nightly:
                add(None, nightly.group("sha"), m.start(), m.end(), "docker", image)
            elif sha_tag and _is_sha(sha_tag.group(1)):  # ...-repo:938772af...: built at a commit
                add(None, sha_tag.group(1), m.start(), m.end(), "docker", image)
            elif vm and version_key(vm.group("num") + (vm.group("pre") or "").lstrip(".-").lower()):
                ver = (vm.group("num") + (vm.group("pre") or "").lstrip(".-").lower()
                       + (("." + vm.group("post").lstrip(".-")) if vm.group("post") else ""))
                add(ver, None, m.start(), m.end(), "docker", image)
            else:  # :latest, :nightly: an image, not a commit
                add(None, None, m.start(), m.end(), "docker", image)
        env = ENV_LINE.match(line)
        other_env = env is not None and not OURS_KEY.search(
            env.group("pkg") or env.group("key") or env.group("row") or "")
        for m in VERSION.finditer(line):
            if _inside(urls, m.start()) or other_env:
                continue
            version = _version_ok(line, m)
            if version is None:
                continue
            local = m.group("local") or ""
            sha = local[2:] if local.startswith("+g") else (
                local[1:] if local[1:] and _is_sha(local[1:]) and
                re.fullmatch(r"[0-9a-f]{7,40}", local[1:]) else None)
            end = m.end("local") if local else m.end("dev") if m.group("dev") else m.end("num")
            for g in ("pre", "post", "dev"):
                if m.group(g):
                    end = max(end, m.end(g))
            how = "+g" if sha else "family" if re.match(r"\.[xX]", line[m.end("num"):]) \
                else "version"
            if sha is None:  # 0.23.1rc1.dev471 (e312c5cb2), 0.6.1 as follow(commit id:9b3e12..)
                window = line[end:end + 80]
                pm = PAREN_SHA.match(window) or re.match(
                    r"[^()（）\n]{0,14}[(（]\s{0,2}commit(?:\s+id)?\s{0,2}[:=]?\s{0,2}`?"
                    r"(?P<sha>[0-9a-f]{7,40})", window) or re.match(
                    r",\s{0,2}commit\s{0,2}\[?`?(?P<sha>[0-9a-f]{7,40})", window)
                if pm and _is_sha(pm.group("sha")):
                    sha, how = pm.group("sha"), "version+sha"
                    end = end + pm.end("sha")
            add(version, sha, m.start(), end, how)
        for pat, how in ((NIGHTLY_TAG, "nightly-tag"), (LABELLED_SHA, "labelled"),
                         (BACKTICK_SHA, "backticks"), (FULL_SHA, "full-sha")):
            for m in pat.finditer(line):
                sha = m.group("sha")
                if _inside(urls, m.start("sha")) or not _is_sha(sha):
                    continue
                add(None, sha, m.start("sha"), m.end("sha"), how)
        for m in MAIN_REF.finditer(line):
            a, b = m.start("main"), m.end("main")
            if line[a - 1:a] == "(" and line[b:b + 1] == ",":
                continue  # "Python 3.12.3 (main, Jul 5 2023, ...)": Python's build tag
            if not _inside(urls, a):
                add(None, None, m.start("main"), m.end("main"), "main", name="main")
        if len(out) >= MAX_MENTIONS:
            break
    out.sort(key=lambda x: (x.line, x.start))
    return out[:MAX_MENTIONS]
