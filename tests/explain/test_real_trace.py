"""The trace reader and the diff on real vLLM 0.25.1 traces (tests/fixtures/vllm-0.25.1-trace,
captured on an H200 and an H100 and trimmed to six decode steps, and the numbers explain kept
of four profiled servers; its README says how)."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_bisect.explain.diff import DeltaKind, profile_diff
from vllm_bisect.explain.report_section import explain_lines, short_kernel
from vllm_bisect.explain.trace import STEP_RE, TraceSummary, load_events, summarize

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


GRAPHS = HERE / "cuda_graphs.pt.trace.json.gz"


def test_real_cuda_graphs_one_launch_call_runs_many_kernels() -> None:
    # the host-cost history's parent served without --enforce-eager (CUDA graphs and
    # torch.compile), captured on an H100 (docs/validation.md (m)); against the eager trace
    # of the same history's culprit (the host cost moves no kernel)
    graphs, eager = summarize(GRAPHS), summarize(MTP_ON)
    assert graphs.steps == 6 and graphs.notes == []
    calls = [e for e in load_events(GRAPHS) if e.get("name") == "cudaGraphLaunch"]
    assert len(calls) >= 6 * graphs.steps  # the pieces of the model and the drafter
    # a graph launch is one host call for all of its kernels: ~3x fewer calls than kernels
    assert graphs.launch_calls < graphs.launches / 2.5
    assert eager.launch_calls == eager.launches
    # and torch.compile fused kernels: fewer kernels run per step too (the full traces:
    # 281 against 576), less GPU time, half the host time of a step
    assert graphs.launches < 0.6 * eager.launches
    assert graphs.gpu_busy_us < 0.8 * eager.gpu_busy_us
    assert graphs.host_us < 0.7 * eager.host_us
    d = profile_diff([eager], [graphs])
    calls_delta = next(x for x in d.totals if x.key == "step:launch_calls")
    assert calls_delta.kind is DeltaKind.FEWER


def kind2() -> tuple[dict[str, list[TraceSummary]], tuple[list[float | None], list[float | None]]]:
    """The spec-decoding history's planted commit (its proposer's drafts are no longer
    accepted) and its parent, two profiled servers each, as explain kept them (H100)."""
    docs = {side: [json.loads((HERE / f"kind2_{side}-{n}.json").read_text()) for n in (1, 2)]
            for side in ("parent", "culprit")}
    sums = {side: [TraceSummary(**d["summary"]) for d in ds] for side, ds in docs.items()}
    return sums, ([d["tokens_per_step"] for d in docs["parent"]],
                  [d["tokens_per_step"] for d in docs["culprit"]])


def test_real_rejected_drafts_show_as_fewer_tokens_per_step_not_as_a_kernel() -> None:
    sums, tokens = kind2()
    d = profile_diff(sums["parent"], sums["culprit"], tokens)
    totals = {x.key: x for x in d.totals}
    # per decode step the same work: the drafter still runs, its drafts are thrown away
    assert not totals["step:gpu_busy"].beyond
    assert abs(totals["step:launches"].diff) < 5
    out = d.output
    assert out is not None and out.beyond and out.kind is DeltaKind.FEWER
    assert round(out.parent, 2) == 2.40 and out.culprit == 1.0
    # so each output token costs ~2.4x the GPU time
    busy = totals["token:gpu_busy"]
    assert busy.beyond and busy.ratio is not None and 2.2 < busy.ratio < 2.6
    # the report leads with it, before any per-step delta
    doc = json.loads((HERE / "kind2_explain.json").read_text())
    doc.update(totals=[x.to_dict() for x in d.totals], deltas=[x.to_dict() for x in d.deltas],
               within_spread=d.within_spread)
    lines = explain_lines(doc)
    first = next(i for i, line in enumerate(lines) if "Largest" in line)
    assert lines[first].startswith("Largest: **fewer output tokens per decode step**, "
                                   "2.40 -> 1.00 (-58.3%)")
    assert "GPU busy per output token +1" in lines[first]
    assert any(line.startswith("| output tokens per decode step (1 + accepted drafts) | 2.40 | "
                               "1.00 | -58.3% |") for line in lines)
    # the planted edit dropped an input write in the proposer: one index_put kernel less
    # time per step is the one GPU kernel beyond the spread that the edit explains
    assert any(x.key.startswith("kernel:") and "index_put_kernel" in x.key
               and x.kind is DeltaKind.FASTER for x in d.deltas)
    assert all(not line.startswith("Largest") for line in lines[first + 1:])
