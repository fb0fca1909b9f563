"""Names a report gives without a Hugging Face id: a model written without its org, and the
hardware (GPUs beyond the common ones, NPUs, Apple M-series, CPUs, cloud instance types).

- **A model without an org** ("gemma 3 4b", "gptoss120B", "qwq-32b", "GLM-4.5", "minimax
  M2.7"): a known model family followed by a size (``32b``, ``120B``) or by a version after a
  dash or a space (``-4.5``, `` M2.7``, ``-V4``). A family with a bare number ("Gemma4",
  "Qwen3") names a family, not a model. Dtypes and access-log tokens ("BF16/INT8",
  "HTTP/1.1") are never a model: they are no family.
- **Hardware** is read from the text with its URLs removed (a repository called
  ``club-3090`` or ``spark-vllm-docker`` says nothing about the reporter's machine), with
  ASCII boundaries (Chinese text runs into names: "硬件910b", "在310P上").
"""

from __future__ import annotations

import re

from vllm_bisect.triage.versions import title_index

URL = re.compile(r"https?://\S{1,2000}")
FAMILY = (r"(?:Qwen|QwQ|Meta-Llama|CodeLlama|Llama|Gemma|ChatGLM|GLM|DeepSeek|Mixtral|Mistral|"
          r"Ministral|Kimi|MiniMax|gpt-?oss|Phi|Nemotron|StarCoder|InternVL|InternLM|Baichuan|"
          r"Falcon|Granite|MiMo|Hunyuan|Pangu|Yi)")
# a model line's variant words: "pangu pro moe", "qwen-coder-next", "DeepSeek V4 Flash"
VARIANT = r"(?:Pro|MoE|Coder|Next|Flash|VL|Thinking|Max|Plus|Turbo|Air|Omni|Ultra)"
MODEL = re.compile(rf"(?<![A-Za-z0-9_/.-])(?P<name>{FAMILY}[A-Za-z0-9_.]{{0,40}}"
                   r"(?:-[A-Za-z0-9][A-Za-z0-9_.]{0,20}"           # -4.5, -V4, -Pro, -70B, -it
                   r"| (?:\d{1,3}x\d{1,3}[bB]|\d{1,3}(?:\.\d)?[bBmM]?|[A-Za-z]\d{1,2}(?:\.\d{1,2})?"
                   rf"|{VARIANT})"
                   r"(?![A-Za-z0-9_.]))*"                          # " 3 4b", " M2.7", " 8x7b"
                   # an Ollama tag names the variant: "deepseek-r1:8b", "qwen3-vl:8b"
                   r"(?::(?=[A-Za-z0-9_.-]{0,20}\d)[A-Za-z0-9][A-Za-z0-9_.-]{0,20}(?![A-Za-z0-9_.:/-]))?)",
                   re.IGNORECASE)
SIZE = re.compile(r"\d(?:\.\d{1,2})?[bBmM](?![a-zA-Z])")
SEP_VERSION = re.compile(r"[- ][A-Za-z]{0,2}\d{1,2}(?:\.\d{1,2})?(?![\d])")
# "glm5.2" is GLM-5.2 (a dotted version names a release); "Qwen3" alone names a generation
DOTTED = re.compile(r"\d{1,2}\.\d{1,2}(?![\d.])")
VARIANT_WORD = re.compile(rf"[- ]{VARIANT}(?![A-Za-z])", re.IGNORECASE)
ASCII = r"(?<![A-Za-z0-9])"
END = r"(?![A-Za-z0-9])"
HARDWARE = (
    (re.compile(ASCII + r"(?:RTX\s{0,2})?(?P<n>[2-5]0[5-9]0)\s{0,2}(?P<s>Ti|SUPER)?" + END
                + r"|" + ASCII + r"(?P<n2>[2-5]0[5-9]0)(?P<s2>ti)" + END, re.IGNORECASE),
     "rtx"),
    # workstation cards named by generation: "RTX 6000 Ada", "Ada 6000", "RTX PRO 6000 Blackwell"
    (re.compile(ASCII + r"(?:RTX\s{0,2})?(?:6000\s{0,2}Ada|Ada\s{0,2}6000)" + END, re.IGNORECASE),
     "ada6000"),
    (re.compile(ASCII + r"RTX\s{0,2}PRO\s{0,2}6000" + END, re.IGNORECASE), "pro6000"),
    (re.compile(ASCII + r"(?:RTX\s{0,2})?(?P<x>A[4-6]000|A40(?:-\d{1,2}Q)?|A10|A30)" + END,
                re.IGNORECASE), "x"),
    (re.compile(ASCII + r"(?P<x>910[BC]|310P)\d?" + END, re.IGNORECASE), "upper"),
    (re.compile(ASCII + r"(?:Apple\s{1,3}(?:Silicon\s{1,3})?)?(?P<x>M[1-5](?:\s{1,2}(?:Pro|Max|"
                r"Ultra))?)" + END + r"(?=.{0,40}(?:Mac|METAL|Apple|MLX|macOS|silicon))|"
                + r"Apple\s{1,3}(?:Silicon\s{1,3})?(?P<y>M[1-5](?:\s{1,2}(?:Pro|Max|Ultra))?)" + END),
     "apple"),
    (re.compile(r"(?P<x>(?:Xeon(?:\(R\))?\s{1,3}(?:Platinum|Gold|Silver)?\s{0,2}\d{4}\w?\+?|EPYC\s{1,3}"
                r"\d{4}\w?|Neoverse[- ]V\d))", re.IGNORECASE), "cpu"),
    (re.compile(ASCII + r"(?P<x>(?:p[345]d?e?|g[456]e?|g6e|trn1|inf2)\.\d{0,2}xlarge|"
                r"a[23]-(?:high|mega|ultra)gpu-\d{1,2}g|Standard_N[CDV]\w{2,30})" + END), "x"),
)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def org_less_model(lines: list[str]) -> tuple[str, int] | None:
    """The first model named without an org (the title first), and its line; a later, more
    specific spelling of it wins ("Qwen2-VL" in the title, "Qwen2-vl-7b" in the body: the size
    says which model)."""
    title = title_index(lines) - 1 if any(ln.strip() for ln in lines) else 0
    order = sorted(range(len(lines)), key=lambda i: i != title)
    found: list[tuple[str, int]] = []
    for i in order:
        for m in MODEL.finditer(URL.sub(" ", lines[i])):
            name = m.group("name").strip(" -.")
            rest = name[re.match(FAMILY, name, re.IGNORECASE).end():]  # type: ignore[union-attr]
            if (SIZE.search(rest) or SEP_VERSION.match(rest) or DOTTED.match(rest)
                    or VARIANT_WORD.search(rest)):
                found.append((_trim(name), i + 1))
    if not found:
        return None
    first = found[0]
    if not SIZE.search(first[0]):
        fuller = [f for f in found if _key(f[0]).startswith(_key(first[0])) and SIZE.search(f[0])
                  and len(_key(f[0])) > len(_key(first[0]))]
        return fuller[0] if fuller else first
    return first


GENERIC_DIR = re.compile(r"^(?:models?|weights|ckpts?|checkpoints?|hf|data|model_path|path|to|"
                         r"home|root|export|mnt|workspace|work|cache|\.cache|huggingface|hub|"
                         r"modelscope|snapshots|\.|~|)$", re.IGNORECASE)


def path_name(path: str) -> str | None:
    """The model's name in a local path: its last folder that is not a generic one
    ("/export/model/deepseek/DeepSeek-V3-0324" -> "DeepSeek-V3-0324"), when it reads as a
    name (letters and a digit, or a known family); None for "/data/models"."""
    for part in reversed(path.replace("\\", "/").rstrip("/").split("/")):
        if GENERIC_DIR.match(part):
            continue
        if re.search(r"[A-Za-z]", part) and (re.search(r"\d", part) or re.match(FAMILY, part, re.I)):
            return part
        return None
    return None


def _trim(name: str) -> str:
    """"gemma 3 4b output" -> "gemma 3 4b": words after the last size/version/variant go."""
    words = name.split(" ")
    while len(words) > 1 and not re.search(r"\d", words[-1]) and not re.fullmatch(
            VARIANT, words[-1], re.IGNORECASE):
        words.pop()
    return " ".join(words)


def hardware(text: str) -> str | None:
    """The first GPU/NPU/CPU/instance the text names, canonically spelled (None: none)."""
    text = URL.sub(" ", text)
    best: tuple[int, str] | None = None
    for pat, kind in HARDWARE:
        m = pat.search(text)
        if m is None or (best is not None and m.start() >= best[0]):
            continue
        if kind == "rtx":
            n = m.group("n") or m.group("n2")
            suffix = (m.group("s") or m.group("s2") or "").lower()
            name = f"RTX {n}" + {"ti": " Ti", "super": " SUPER"}.get(suffix, "")
        elif kind in ("ada6000", "pro6000"):
            name = "RTX 6000 Ada" if kind == "ada6000" else "RTX PRO 6000"
        elif kind == "upper":
            name = m.group("x").upper()
        elif kind == "apple":
            name = re.sub(r"\s{1,2}", " ", m.group("x") or m.group("y"))
        else:
            name = re.sub(r"\(R\)", "", m.group("x")).replace("  ", " ")
        best = (m.start(), name)
    return best[1] if best else None
