"""The profile diff: kinds, ranking, the GPU-wide level, what stays within the spread."""

from __future__ import annotations

from vllm_bisect.explain.diff import DeltaKind, gpu_levels, profile_diff
from vllm_bisect.explain.trace import TraceSummary

BASE = {"gemm": 800.0, "attn": 700.0, "moe": 900.0, "norm": 100.0}


def summary(kernels: dict[str, float], idle: float = 300.0, scale: float = 1.0) -> TraceSummary:
    k = {n: us * scale for n, us in kernels.items()}
    return TraceSummary(path="x", steps=50, kernel_us=k, cpu_op_us={"aten::copy_": 100.0},
                        gpu_busy_us=sum(k.values()), gpu_idle_us=idle, host_us=200.0,
                        launches=float(len(k)), segmentation="test")


def test_new_gone_slower_are_named_largest_first() -> None:
    parent = [summary(BASE, scale=s) for s in (1.0, 1.005)]
    changed = {**BASE, "moe": 1400.0, "new_kernel": 90.0}
    del changed["norm"]
    culprit = [summary(changed, idle=900.0, scale=s) for s in (0.998, 1.004)]
    d = profile_diff(parent, culprit)
    got = [(x.key, x.kind) for x in d.deltas]
    assert got == [("step:gpu_idle", DeltaKind.SLOWER), ("kernel:moe", DeltaKind.SLOWER),
                   ("kernel:norm", DeltaKind.GONE), ("kernel:new_kernel", DeltaKind.NEW)]
    assert {t.key for t in d.totals} == {"step:gpu_busy", "step:host", "step:launches",
                                         "step:launch_calls",
                                         "step:gpu_idle"}


def test_a_uniform_shift_is_one_gpu_wide_delta_not_every_kernel() -> None:
    parent = [summary(BASE, scale=s) for s in (1.0, 1.01)]
    culprit = [summary(BASE, scale=s) for s in (1.5, 1.51)]
    d = profile_diff(parent, culprit)
    assert [x.key for x in d.deltas] == ["step:gpu_level"]
    assert d.deltas[0].kind is DeltaKind.SLOWER


def test_levels_ignore_one_kernel_and_need_three_common_kernels() -> None:
    a = {f"kernel:{k}": v for k, v in BASE.items()}
    b = {**a, "kernel:moe": 5000.0}
    assert gpu_levels([a, b]) == [1.0, 1.0]  # one kernel moved: the median did not
    assert gpu_levels([{"kernel:x": 1.0}, {"kernel:x": 2.0}]) == [1.0, 1.0]


def test_noise_within_the_spread_is_counted_not_reported() -> None:
    parent = [summary(BASE, scale=1.0), summary({**BASE, "attn": 740.0})]
    culprit = [summary({**BASE, "attn": 720.0}), summary({**BASE, "attn": 730.0})]
    d = profile_diff(parent, culprit)
    assert d.deltas == [] and d.within_spread >= 1


def test_tokens_per_step_and_the_per_token_costs() -> None:
    parent = [summary(BASE, scale=s) for s in (1.0, 1.01)]
    culprit = [summary(BASE, scale=s) for s in (1.0, 1.005)]
    # the same kernels per step, but 1 token a step instead of ~2.4: drafts rejected
    d = profile_diff(parent, culprit, ([2.4, 2.38], [1.0, 1.0]))
    out = d.output
    assert out is not None and out.beyond and out.kind is DeltaKind.FEWER
    busy = next(x for x in d.totals if x.key == "token:gpu_busy")
    assert busy.beyond and busy.ratio is not None and 2.3 < busy.ratio < 2.5
    assert d.deltas == []  # nothing moved per step: the answer is the output per step
    # within the servers' own spread: shown, not beyond
    d = profile_diff(parent, culprit, ([2.4, 2.0], [2.1, 2.3]))
    assert d.output is not None and not d.output.beyond
    # a server whose tokens are unknown (a load grid, a benchmark): no per-token rows
    for tokens in (([2.4, None], [1.0, 1.0]), ([2.4], [1.0, 1.0]), None):
        d = profile_diff(parent, culprit, tokens)  # type: ignore[arg-type]
        assert d.output is None and not any(x.key.startswith("token:") for x in d.totals)


def test_counts_per_step_are_more_or_fewer_not_slower() -> None:
    parent = [summary(BASE) for _ in range(2)]
    culprit = [summary({**BASE, "a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}) for _ in range(2)]
    launches = next(x for x in profile_diff(parent, culprit).totals if x.key == "step:launches")
    assert launches.kind is DeltaKind.MORE and launches.beyond
