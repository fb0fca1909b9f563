"""Sized prompts: cut with the server's POST /tokenize (the simulator answers it as vLLM 0.25.1
does), checked against usage.prompt_tokens; what happens without /tokenize."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import ServerFactory
from vllm_bisect.errors import ProbeError
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.probes.prompt import PromptSizer, SizedPrompt, check_prompt_tokens
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.spec import Endpoint, ProbeSpec


def test_sim_tokenize_answers_like_vllm(sim_server: ServerFactory) -> None:
    url = sim_server("--model", "m", "--max-model-len", "4096")
    r = httpx.post(f"{url}/tokenize", json={"model": "m", "prompt": "a b c d",
                                            "add_special_tokens": True})
    assert r.status_code == 200
    doc = r.json()
    # vllm/entrypoints/serve/tokenize/protocol.py: TokenizeResponse
    assert set(doc) == {"count", "max_model_len", "tokens", "token_strs"}
    assert doc["count"] == 4 == len(doc["tokens"]) and doc["max_model_len"] == 4096
    assert doc["token_strs"] is None
    chat = httpx.post(f"{url}/tokenize", json={
        "model": "m", "messages": [{"role": "user", "content": "x y"}],
        "add_generation_prompt": True, "return_token_strs": True}).json()
    assert chat["count"] == 2 and len(chat["token_strs"]) == 2
    wrong = httpx.post(f"{url}/tokenize", json={"model": "other", "prompt": "a"})
    assert wrong.status_code == 404 and "does not exist" in wrong.json()["error"]["message"]
    assert httpx.post(f"{url}/tokenize", json={"model": "m"}).status_code == 400


@pytest.mark.parametrize("endpoint", [Endpoint.COMPLETIONS, Endpoint.CHAT])
def test_probe_sends_a_prompt_of_the_asked_size(sim_server: ServerFactory,
                                                endpoint: Endpoint) -> None:
    url = sim_server("--model", "m", "--max-model-len", "8192")
    spec = ProbeSpec(prompt="Write a long story about a lighthouse keeper.", prompt_tokens=3000,
                     max_tokens=16, requests=2, warmup=0, endpoint=endpoint)
    m = DecodeProbe(spec).measure(ServerHandle(url=url, model="m"))
    assert m.prompt_tokens == 3000
    assert [r.prompt_tokens for r in m.requests] == [3000, 3000]
    assert m.output_tokens == [16, 16]


def test_sizer_takes_the_longest_prefix_that_fits(sim_server: ServerFactory) -> None:
    url = sim_server("--model", "m", "--max-model-len", "8192")
    sizer = PromptSizer("one two three")
    with httpx.Client() as c:
        got = sizer.build(c, url, "m", Endpoint.COMPLETIONS, 10)
        assert got.tokens == 10 and got.text.split() == ("one two three " * 4).split()[:10]
        assert got.max_model_len == 8192
        assert sizer.build(c, url, "m", Endpoint.COMPLETIONS, 10) is got   # cached
        with pytest.raises(ProbeError, match="does not fit the server's max_model_len"):
            sizer.build(c, url, "m", Endpoint.COMPLETIONS, 9000)


def test_server_without_tokenize_is_a_probe_error(replay_server: ServerFactory) -> None:
    url = replay_server("sse_ngram_k3_tiny.json")
    spec = ProbeSpec(prompt="hello", prompt_tokens=100, max_tokens=8, requests=1, warmup=0)
    with pytest.raises(ProbeError, match="/tokenize answered HTTP 404"):
        DecodeProbe(spec).measure(ServerHandle(url=url, model="/tmp/tiny"))


def test_a_server_count_that_differs_from_tokenize_fails() -> None:
    sized = SizedPrompt("x " * 100, tokens=100, target=100, max_model_len=None)
    check_prompt_tokens(sized, [100, None, 100])
    with pytest.raises(ProbeError, match=r"usage.prompt_tokens \[101\] differs"):
        check_prompt_tokens(sized, [100, 101])
