"""A scrape parses only the /metrics families the probe reads (probes/metrics.py ``READ``):
on real vLLM 0.25.1 traffic (tests/fixtures/vllm-0.25.1-mtp, captured before and after MTP
requests) the counters' deltas are the same as from every line."""

from __future__ import annotations

from pathlib import Path

from vllm_bisect.probes import metrics

FIXTURE = Path(__file__).parents[1] / "fixtures" / "vllm-0.25.1-mtp"


def scrapes(name: str, marker: str) -> tuple[str, str]:
    text = (FIXTURE / name).read_text()
    before, after = text.split(marker)
    return before.split("\n", 1)[1], after


def test_the_families_read_give_the_same_deltas_as_every_line() -> None:
    for name, marker in (("metrics_mtp_before_after.txt",
                          "########## A_mtp_qwen3next: after requests\n"),
                         ("metrics_gencfg_cap128_before_after.txt",
                          "########## B_mtp_qwen3next_cap128: after requests\n")):
        before, after = scrapes(name, marker)
        whole = metrics.diff(metrics.parse(before), metrics.parse(after))
        read = metrics.diff(metrics.parse(before, metrics.READ),
                            metrics.parse(after, metrics.READ))
        assert read == whole, name
        assert whole.acceptance_length is not None or whole.generation_tokens is not None


def test_only_the_read_families_and_no_buckets_are_kept() -> None:
    _, after = scrapes("metrics_mtp_before_after.txt",
                       "########## A_mtp_qwen3next: after requests\n")
    kept = metrics.read_lines(after).splitlines()
    assert 0 < len(kept) < len(after.splitlines()) // 10
    assert not [ln for ln in kept if "_bucket" in ln]
    names = {metrics._name(ln) for ln in kept}
    assert "vllm:inter_token_latency_seconds_sum" in names
    assert all(n.startswith(metrics.READ) for n in names)
    assert metrics._name("# HELP vllm:generation_tokens_total Number of tokens.") == \
        "vllm:generation_tokens_total"
    assert metrics._name("# a comment") == "" and metrics._name("") == ""
    # a garbled line of a family nothing reads no longer spoils the scrape
    garbled = after + 'vllm:kv_cache_usage_perc{engine="0" 0.5\n'
    assert metrics.parse(garbled, metrics.READ) == metrics.parse(after, metrics.READ)
