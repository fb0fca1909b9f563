"""Issue 31, round 3: general rules found by studying why round 2 did not generalise (the
held-out-32 misses), one decision per test, each with what it must not catch. Each of these
inputs is read wrongly (or not at all) by the round-2 rules."""

from __future__ import annotations

from vllm_bisect.triage import triage


def pair(text: str) -> tuple[str | None, str | None]:
    t = triage(text)
    assert t.search.value == "regression"
    return t.good, t.bad


def test_pep440_dash_separators_are_part_of_the_version() -> None:
    # "v0.6.3-post1" is 0.6.3.post1 (PEP 440 allows "-"), not the 0.6.3 release
    assert pair("# Outputs differ between vLLM v0.6.3-post1 and vLLM v0.6.1-post2\n") == (
        "v0.6.1.post2", "v0.6.3.post1")
    assert pair("# x\n\nsglang v0.4.4 is OK, but 0.4.6-post4-cu124 fails\n") == (
        "v0.4.4", "v0.4.6.post4")
    # a branch suffix is still not a ref
    assert pair("# x\n\nv0.11.0-dev is slow, v0.10.0 ok\n")[0] == "v0.10.0"


def test_a_verdict_with_a_preposition_binds_to_the_ref_after_it() -> None:
    # "（ok in 0.7.2）" is 0.7.2's verdict, not 0.8.3's
    assert pair("# [Bug]: Severe OOM in 0.8.3 （ok in 0.7.2）\n") == ("v0.7.2", "v0.8.3")
    assert pair("# Slow on v0.12.9 (works correctly in v0.12.5)\n") == ("v0.12.5", "v0.12.9")
    # without the preposition the bracket is still the ref before it
    assert pair("# x\n\nv0.5.3 (ok), v0.6.0 crashes\n") == ("v0.5.3", "v0.6.0")


def test_a_version_bound_names_the_last_good_version() -> None:
    t = triage("# api_server crashes when the version is higher than 0.5.3.\n")
    assert (t.good, t.bad) == ("v0.5.3", None)


def test_markdown_around_refs_does_not_hide_an_arrow() -> None:
    a, b = "db2eb47500c54be4934d7efbdad57864999216e8", "95f5ecd3d26665423d3e6577a2a00c04f5cde733"
    assert pair(f"# TTFT up 3%\n\nUpdating from main commit `{a}` to main commit `{b}` "
                "increased TTFT.\n") == (a, b)


def test_a_verdict_in_brackets_after_a_ref_is_that_refs() -> None:
    a, b = "a749a33d8d05acdd3ab346bd3f0c6b5c9c80474f", "01d4d1ad375dc5854779c593eee093bcebb0cada"
    assert pair(f"# Gibberish\n\nHappens between `{a}` (works well) `{b}` (gibberish output).\n"
                ) == (a, b)


def test_a_short_sha_and_its_full_form_are_one_commit() -> None:
    full_a = "07f326c184257e903d1d6446417a62ea5e9d3d86"
    full_b = "e76d36214b0f4a6d1cd7af6bab6e199c97bcddfa"
    text = ("# Slow decode\n\n| source | tok/s |\n|---|---:|\n"
            f"| Parent [`07f326c`](https://github.com/o/r/commit/{full_a}) | 120.03 |\n"
            f"| Regressed merge [`e76d362`](https://github.com/o/r/commit/{full_b}) | 94.13 |\n")
    assert pair(text) == (full_a, full_b)


def test_another_packages_table_column_is_not_the_range() -> None:
    text = ("# Slow decode\n\n| SGLang | FlashInfer | tok/s |\n|---|---|---:|\n"
            "| v0.5.1 (good) | 0.6.12 | 120 |\n| v0.5.2 | 0.6.15.post1 | 94 |\n")
    t = triage(text)
    assert (t.good, t.bad) == ("v0.5.1", "v0.5.2")
    assert not any(p.get("ref", "").startswith("v0.6") for p in t.points)


def test_try_the_latest_version_turns_an_inferred_range_into_a_fix_search() -> None:
    t = triage("# Accuracy issue on v0.7.3\n\ncomment: which version fixes this? I see it on "
               "vllm 0.7.3 too.\n\ncomment: Please try current latest version >= v0.9.1rc1\n")
    assert (t.search.value, t.good, t.bad) == ("fix", "v0.7.3", "v0.9.1rc1")
    # a good end the report names itself is not overridden
    t = triage("# Slow\n\nv0.7.3 works fine, v0.8.0 is slow. Try the latest version too.\n")
    assert (t.search.value, t.good, t.bad) == ("regression", "v0.7.3", "v0.8.0")


def test_dated_commits_are_ordered_by_date() -> None:
    a, b = "6ae67088c97afed9018d4b96050169f26e0b939c", "bf82331808838ce11f75e608580fa48b936db7e7"
    text = (f"# Prefill regression\n\ncommit {a}\nDate:   Wed Dec 24 13:32:49 2025 -0500\n"
            f"TTFT 29.5ms\n\ncommit {b}\nDate:   Wed Dec 24 09:50:57 2025 -0800\nTTFT 25.95ms\n")
    assert pair(text) == (b, a)
    c, d = "44a61419267e40a8d6edded4205c4fbbee500cb3", "347190144b4ac59e3dc9fad0000022325d972d61"
    assert pair(f"# Slower\n\n> {c}(May 25 nightly) 39 samples/s\n> {d}(May 24 nightly) 56 "
                "samples/s\n") == (d, c)
    # one date for both: no order, no pair
    assert pair(f"# Slower\n\n{c} and {d}, both 2026-05-25\n") == (None, None)


def test_symptom_words_by_class_not_by_phrase() -> None:
    def symptoms(text: str) -> list[str]:
        return sorted(triage(text).symptoms)

    assert symptoms("# 0.9.1版本推理卡住\n") == ["crash"]
    assert symptoms("# The server hangs after upgrading to v0.5.0\n") == ["crash"]
    assert symptoms("# After vllm is upgraded to 0.6.5, an error is reported\n") == ["crash"]
    assert symptoms("# GLM 推理输出无意义内容\n") == ["correctness"]
    assert symptoms("# The output of Qwen2 VL are different between v0.6.3 and v0.6.1\n") == [
        "correctness"]
    assert symptoms("# v0.8.0 says there is not enough memory, v0.7.3 starts\n") == ["memory"]
    assert symptoms("# x\n\nOn v0.6.0 it dropped from 120 req/min to 80 req/min\n") == [
        "throughput"]
    assert symptoms("# Slower\n\nQwen3 75T/s on 0.4.6 to 45T/s on 0.4.7\n") == ["throughput"]
    # what they must not catch: a model that is "stuck" in a side remark is not a hang symptom,
    # and the same outputs are not a correctness symptom
    assert symptoms("# Slower\n\nv0.5 got 100 tok/s, v0.6 dropped to 50 tok/s; the pod looked "
                    "stuck once.\n") == ["throughput"]
