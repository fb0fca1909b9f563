"""The role grammar of issue 31's second round, one decision per input (and what it must not
catch): upgrade nouns, A/B labels, "this PR", failure words before a ref, two-part versions in
an upgrade arrow, .dev versions, version families, compare URLs and shas in image tags."""

from __future__ import annotations

from vllm_bisect.triage import triage


def pair(text: str) -> tuple[str | None, str | None]:
    t = triage(text)
    assert t.search.value == "regression"
    return t.good, t.bad


def test_before_the_x_upgrade_names_x_as_the_bad_end() -> None:
    assert pair("# Slow decode\n\nBefore the v0.12.0 upgrade decode was fast; v0.11.2 works "
                "fine.\n") == ("v0.11.2", "v0.12.0")
    # without the upgrade noun "before X" still marks X as the good one
    assert pair("# Slow decode\n\nIt was fast before v0.11.2, and v0.12.0 is slow.\n") == (
        "v0.11.2", "v0.12.0")


def test_control_and_treatment_and_a_pre_regression_control() -> None:
    assert pair("# Slow structured output\n\n```\nv0.21.0 (pre-regression control)   515s\n"
                "v0.24.0 stock                      997s\n```\n") == ("v0.21.0", "v0.24.0")
    assert pair("# A/B\n\ncontrol: `3f1a2b3c4d5e`\ntreatment: `9e8d7c6b5a4f`\n") == (
        "3f1a2b3c4d5e", "9e8d7c6b5a4f")
    # "regression" after a ref still marks it bad
    assert pair("# Slow\n\nv0.24.0 regressed; v0.21.0 is fine.\n") == ("v0.21.0", "v0.24.0")


def test_this_pr_is_the_change_but_not_before_or_prior_to_it() -> None:
    assert pair("| build | tok/s |\n|---|---|\n| main (last good, `14d5866bc1`) | 63.7 |\n"
                "| this PR (`9aabd39b69`) | 61.7 |\n") == ("14d5866bc1", "9aabd39b69")
    assert pair("# Slower\n\nPrior to this PR, eg commit 6fca51815706fbb0735849b95c0dafa05da20f9f,"
                " I get 10 tok/s.\nWith this PR, commit 20dcd984f9a49b8dc69c400486eed50953cb16cf,"
                " I get 7 tok/s.\n") == ("6fca51815706fbb0735849b95c0dafa05da20f9f",
                                        "20dcd984f9a49b8dc69c400486eed50953cb16cf")


def test_failure_words_and_dev_versions() -> None:
    assert pair("# Slow\n\nWorks on 0.1.dev19754 but is slower on "
                "0.28.1rc1.dev87+g6d4562c59.\n") == ("0.1.dev19754", "6d4562c59")
    assert pair("# Crash\n\nIt crashes with v0.9.0; v0.8.5 was fine.\n") == ("v0.8.5", "v0.9.0")


def test_two_part_versions_in_an_upgrade_arrow_but_not_alone() -> None:
    assert pair("# [Bug]: 精度下降\n\n自研模型从0.11升级到0.13精度出现问题\n") == ("v0.11.0", "v0.13.0")
    assert pair("# [Performance]: 升级 v0.11.0rc1 后，性能变差\n\nv0.9.1 的 TPOT 20ms，"
                "v0.11 的 TPOT 27ms。\n") == ("v0.9.1", "v0.11.0rc1")
    t = triage("# Slow\n\nWe moved the box from 3.2 kW to 3.3 kW.\n")
    assert (t.good, t.bad) == (None, None)


def test_a_version_family_stands_in_only_when_no_versions_are_named() -> None:
    assert pair("# Repeats on v0.11.x, v0.10.2 is ok\n") == ("v0.10.2", "v0.11.0")
    # a family next to two concrete versions is a loose remark, not an end
    assert pair("# v1.10.x is slower than 0.8.5.post1\n\nSlow on 0.10.1.1, fine on "
                "0.8.5.post1.\n") == ("v0.8.5.post1", "v0.10.1.1")


def test_compare_urls_and_shas_in_image_tags() -> None:
    assert pair("# Regression\n\nRange: https://github.com/vllm-project/vllm/compare/"
                "abc1234def...fed4321cba\nThroughput dropped.\n") == ("abc1234def", "fed4321cba")
    good, bad = "938772af" + "1" * 32, "5d2c7e1a" + "2" * 32
    assert pair(f"# Slow\n\nGood image: vllm-ci-postmerge-repo:{good}\nBad image: "
                f"vllm-ci-postmerge-repo:{bad}\n") == (good, bad)
    t = triage("# Slow on vllm/vllm-openai:latest\n")
    assert (t.good, t.bad) == (None, None)  # a tag that is no commit is not a ref


def test_one_metric_value_per_line_on_two_lines_is_a_comparison() -> None:
    t = triage("# [Performance]: 算子性能变差\n\nv0.9.1 测得 TPOT 在 20～21ms左右。\n"
               "v0.11 测得 TPOT 在 27 ms 左右。\n")
    assert t.symptoms == ["itl"]
    t = triage("# nightly experiment\n\n- Sept 3: installed `42e039a9`, Output TPS `707.59`.\n"
               "- Sept 4: installed `93c3fd64`, Output TPS `647.96`.\n")
    assert t.symptoms == ["throughput"]
    # one value on one line only is no comparison
    assert triage("# nightly experiment\n\n- installed `42e039a9`, Output TPS `707.59`.\n"
                  ).symptoms == []


def test_bold_table_cells_are_read() -> None:
    t = triage("## Paired A/B\n\n| build | decode | TPOT |\n|---|---|---|\n"
               "| a | **63.7 tok/s** | **15.70 ms** |\n| b | **61.7 tok/s** | **16.21 ms** |\n")
    assert t.symptoms == ["itl"]


def test_a_table_beats_a_side_remark_about_another_issue() -> None:
    table = "| version | tok/s |\n|---|---|\n| v0.10.0 | 5000 |\n| v0.11.0 | 3000 |\n"
    remark = "This looks like #1234, which was fixed in v0.9.0 after upgrading to v0.8.5.\n"
    t = triage("# Throughput regression\n\n" + table + "\n" + remark)
    assert (t.search.value, t.good, t.bad) == ("regression", "v0.10.0", "v0.11.0")
    # without a table the sentence is all there is: it is read
    assert triage("# Throughput regression\n\n" + remark).search.value == "fix"
