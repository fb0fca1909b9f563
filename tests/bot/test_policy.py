"""What a request may set: base_spec plus the operator's allowlist (and the payload models)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vllm_bisect.bot.commands import allowlist, job_spec
from vllm_bisect.bot.config import BotConfig
from vllm_bisect.bot.payload import EventKind, ValidationError, parse_event
from vllm_bisect.bot.policy import describe, effective_spec
from vllm_bisect.bot.triage_call import read_issue
from vllm_bisect.errors import SpecError

HOSTILE = """MTP decode regressed: works at `e312c5cb2` (good), but at `a16dbd5b8` every \
answer is capped at 128 tokens (bad).

```
TRITON_PTXAS_PATH=/tmp/evil_ptxas CUDA_VISIBLE_DEVICES=3 VLLM_ATTENTION_BACKEND=FLASHINFER \\
VLLM_USE_V1=1 vllm serve Qwen/Qwen3-8B --trust-remote-code --host 0.0.0.0 \\
  --chat-template /etc/shadow --max-model-len 4096 --gpu-memory-utilization 0.85 \\
  --speculative-config '{"method": "eagle", "num_speculative_tokens": 3, "model": "evil/draft"}'
```
"""
BASE: dict[str, Any] = {
    "range": {"repo": "/srv/vllm"}, "build": {"kind": "wheel"},
    "serve": {"model": "Qwen/Qwen3-8B", "args": ["--max-model-len", "8192"],
              "env": {"VLLM_USE_V1": "0", "HF_HUB_OFFLINE": "1", "MY_API_TOKEN": "t0p"},
              "pass_env": ["HF_TOKEN"]}}


def cfg(**over: Any) -> BotConfig:
    return BotConfig.model_validate({"base_spec": BASE, **over})


def test_hostile_issue_body_is_refused_item_by_item() -> None:
    plan = job_spec(cfg(), None, HOSTILE)   # a maintainer's bare /bisect
    serve = plan.spec["serve"]
    # the operator's args and env stay; only allowlisted, path-free items are added
    assert serve["args"] == ["--max-model-len", "8192", "--gpu-memory-utilization", "0.85"]
    assert serve["env"] == {**BASE["serve"]["env"], "VLLM_ATTENTION_BACKEND": "FLASHINFER"}
    assert serve["speculative"] == {"method": "eagle", "num_speculative_tokens": 3}
    assert plan.spec["build"] == {"kind": "wheel"} and serve["pass_env"] == ["HF_TOKEN"]
    assert plan.spec["range"] == {"repo": "/srv/vllm", "good": "e312c5cb2", "bad": "a16dbd5b8"}
    refused = "\n".join(plan.refused)
    for item in ("--trust-remote-code", "--chat-template /etc/shadow",
                 "TRITON_PTXAS_PATH", "CUDA_VISIBLE_DEVICES", "model=evil/draft"):
        assert item in refused, item
    assert "`--max-model-len 4096` (set by the operator)" in refused
    assert "`VLLM_USE_V1` (set by the operator)" in refused
    text = describe(plan)
    assert "--max-model-len 8192 --gpu-memory-utilization 0.85" in text
    assert "`VLLM_ATTENTION_BACKEND=FLASHINFER`" in text and "`MY_API_TOKEN=<redacted>`" in text
    assert "t0p" not in text and "`HF_HUB_OFFLINE`" in text and "/etc/shadow" in text
    assert "passed from the bot's environment: `HF_TOKEN`" in text


def test_explicit_arguments_and_models() -> None:
    plan = job_spec(cfg(), "good=v0.10.0 bad=abcdef12 symptom=any model=evil/model", HOSTILE)
    assert plan.spec["range"]["good"] == "v0.10.0" and plan.spec["verdict"]["symptom"] == "any"
    assert plan.spec["serve"]["model"] == "Qwen/Qwen3-8B"
    assert any("`evil/model` (not in allowed_models)" in r for r in plan.refused)
    allowed = job_spec(cfg(allowed_models=["evil/*"]), "model=evil/model", HOSTILE)
    assert allowed.spec["serve"]["model"] == "evil/model"
    with pytest.raises(SpecError, match="is not a commit"):
        job_spec(cfg(), "good=--upload-pack=x bad=y", "")
    with pytest.raises(SpecError, match="could not determine good and bad"):
        job_spec(cfg(), None, "nothing here")
    # the threshold rule needs a threshold for itl (auto, the default, calibrates instead)
    threshold = cfg(base_spec={**BASE, "verdict": {"strategy": "threshold"}})
    with pytest.raises(SpecError, match="itl_factor") as err:  # names the key, not the values
        job_spec(threshold, "good=a1b2c3d bad=abcdef12 symptom=itl", "")
    assert "t0p" not in err.value.message and "t0p" not in str(err.value.hint)


def test_operator_allowlist_and_values() -> None:
    allow = allowlist(cfg(allowed_serve_flags=["--chat-template", "--enforce-eager"],
                          allowed_env=["TRITON_PTXAS_PATH"]))
    found = {"args": ["stray", "--chat-template", "/etc/shadow", "--enforce-eager",
                      "--chat-template=a;b"],
             "env": {"TRITON_PTXAS_PATH": "/tmp/evil", "X": "1"}}
    plan = effective_spec({}, {}, found, allow)
    assert plan.spec["serve"]["args"] == ["--enforce-eager"]   # paths are never values
    # whatever triage lets through, the allowlist decides (triage itself drops --host now)
    default = effective_spec({}, {}, {"args": ["--host", "0.0.0.0", "--port", "80",
                                               "--api-key", "k", "--max-num-seqs", "8"]},
                             allowlist(cfg()))
    assert default.spec["serve"]["args"] == ["--max-num-seqs", "8"]
    assert [r.split("`")[1] for r in default.refused] == ["--host 0.0.0.0", "--port 80",
                                                          "--api-key k"]
    # `vllm bench` flags and probe settings from an issue: allowlisted and bounded
    bench = effective_spec({}, {}, {"probe": {
        "bench": {"kind": "serve", "args": ["--dataset-path", "/etc/shadow", "--num-prompts", "8",
                                            "--result-dir", "/"]},
        "load": {"concurrency": 10**6, "requests": 4}, "prompt": "x", "requests": 10**9}},
        allowlist(cfg()))
    assert bench.spec["probe"] == {"bench": {"kind": "serve", "args": ["--num-prompts", "8"]},
                                   "load": {"concurrency": 64, "requests": 4}}
    assert len(bench.refused) == 4
    assert plan.spec["serve"]["env"] == {}
    assert len(plan.refused) == 5
    assert all(len(r) < 200 and "\n" not in r for r in plan.refused)


def test_config_refuses_passing_the_bots_own_credentials() -> None:
    with pytest.raises(ValueError, match="GITHUB_TOKEN"):
        BotConfig.model_validate({"base_spec": {"serve": {"pass_env": ["GITHUB_TOKEN"]}}})


def test_triage_is_capped_and_time_bounded() -> None:
    r = read_issue("works at `e312c5cb2` (good) " + "x" * 5000, max_chars=100, timeout_s=30)
    assert r.found["good"] == "e312c5cb2" and "first 100 characters" in r.notes[0]
    # a body that takes triage long (a backtracking regex before it was made linear) is cut
    # off at the time bound instead of holding the bot
    slow = read_issue("a/" + "1" * 16000, max_chars=32768, timeout_s=0.2)
    assert slow.found == {} or slow.found["good"] is None
    assert read_issue("", 100, 1).found == {}


GOOD = {"action": "created", "issue": {"number": 1, "body": None},
        "comment": {"id": 5, "body": "/bisect", "user": {"login": "a"},
                    "author_association": "MEMBER"},
        "repository": {"full_name": "o/r"}, "sender": {"login": "a"}}


def _with(path: str, value: Any) -> bytes:
    doc = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("path", "value"), [
    ("repository", KeyError), ("issue.number", [1]), ("issue.number", 10**30),
    ("issue.number", "1"), ("issue.number", True), ("comment", "/bisect"),
    ("repository.full_name", "../../user"), ("repository.full_name", "o/.."),
    ("comment.user.login", "a\nb"), ("issue", None)])
def test_malformed_payloads_do_not_validate(path: str, value: Any) -> None:
    assert parse_event(EventKind.ISSUE_COMMENT, json.dumps(GOOD).encode())
    with pytest.raises(ValidationError):
        parse_event(EventKind.ISSUE_COMMENT, _with(path, value))


def test_deep_or_broken_json_does_not_validate() -> None:
    for body in (b"{not json", b"[" * 100000 + b"]" * 100000, b"\xff\xfe", b""):
        with pytest.raises(ValidationError):
            parse_event(EventKind.ISSUE_COMMENT, body)


def test_the_final_report_hides_credential_like_env_values() -> None:
    from vllm_bisect.bot.worker import redact

    report = '[serve.env]\nMY_API_TOKEN = "t0p"\nHF_HUB_OFFLINE = "1"\n'
    assert redact(report, BASE) == '[serve.env]\nMY_API_TOKEN = "<redacted>"\nHF_HUB_OFFLINE = "1"\n'
