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
