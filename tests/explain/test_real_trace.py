"""The trace reader on real vLLM 0.25.1 traces (tests/fixtures/vllm-0.25.1-trace, captured
on an H200 and trimmed to six decode steps; its README says how)."""

from __future__ import annotations

from pathlib import Path

from vllm_bisect.explain.diff import profile_diff
from vllm_bisect.explain.trace import STEP_RE, load_events, summarize
from vllm_bisect.report.explain_section import short_kernel

HERE = Path(__file__).parent.parent / "fixtures" / "vllm-0.25.1-trace"
MTP_ON = HERE / "host_cost_mtp_on.pt.trace.json.gz"
MTP_OFF = HERE / "mtp_off.pt.trace.json.gz"


def test_real_traces_split_into_vllms_decode_steps() -> None:
    for path, per_step in ((MTP_ON, 4), (MTP_OFF, 1)):
        names = {e["name"] for e in load_events(path) if e.get("cat") == "user_annotation"}
        # six decode steps of one request: MTP's 1 + 3 drafts per step, or one token
        assert names == {f"execute_context_0(0)_generation_1({per_step})"}
        assert all(STEP_RE.match(n) for n in names)
        s = summarize(path)
        assert s.segmentation == "vLLM step annotations (decode steps only)" and s.notes == []
        assert s.steps == 6 and s.kernel_us and s.cpu_op_us


def test_real_mtp_on_against_off_per_step() -> None:
    on, off = summarize(MTP_ON), summarize(MTP_OFF)
    # the verify step runs the target on 4 tokens and 3 MTP passes: about twice the
    # launches and GPU time of a plain step (the full traces: 575 and 256 launches, 881 and
    # 373 us GPU busy per step)
    assert 2.0 < on.launches / off.launches < 2.3
    # eager: one host launch call (cudaLaunchKernel or cuLaunchKernelEx) per kernel run
    assert on.launch_calls == on.launches and off.launch_calls == off.launches
    assert 1.8 < on.gpu_busy_us / off.gpu_busy_us < 2.5
    # the host-cost culprit (MTP on) idles the GPU ~6 ms more between steps
    assert on.gpu_idle_us - off.gpu_idle_us > 4000
    assert set(on.kernel_us) - set(off.kernel_us)  # the MTP drafter's own kernels
    d = profile_diff([off], [on])
    assert {x.key for x in d.totals} >= {"step:gpu_busy", "step:launches", "step:gpu_idle"}


def test_real_kernel_names_read_short_in_the_report() -> None:
    # real traces carry whole C++ signatures (hundreds of characters); the report shows a
    # short name, result.json keeps the full one
    names = set(summarize(MTP_ON).kernel_us) | set(summarize(MTP_OFF).kernel_us)
    assert max(len(n) for n in names) > 500
    short = {short_kernel(n) for n in names}
    assert max(len(n) for n in short) <= 80
    assert {"unrolled_elementwise_kernel<direct_copy_kernel_cuda>",
            "vectorized_elementwise_kernel<MulFunctor>", "device_kernel<FlashAttnFwdSm90>",
            "act_and_mul_kernel<silu_kernel>", "gemvx::kernel<...>", "fused_moe_kernel",
            "rejection_greedy_sample_kernel"} <= short
    assert short_kernel("fused_moe_kernel") == "fused_moe_kernel"
