"""The peer checks' results as Markdown (the ``*_summary.md`` files scripts/gpu_mtp_run.py
writes): the interleaved blocks and their paired comparison, the concurrent rounds and the
comparison per concurrency. Pure functions of the result documents."""

from __future__ import annotations

from typing import Any

__all__ = ["concurrent_summary", "interleaved_summary", "pct"]


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2%}"


def interleaved_summary(doc: dict[str, Any]) -> str:
    """The stage's result as markdown: the blocks in run order, then the paired comparison."""
    p, pc = doc["paired"], doc["paired_chunk"]
    lines = [f"# interleaved peer check, concurrency {doc['concurrency']}, "
             f"{doc['block_requests']} requests per block, in {doc['in']} / out {doc['out']}",
             "", "| block | side | start (s) | mean per-token ms | mean chunk ITL ms |",
             "|---|---|---|---|---|"]
    for b in doc["blocks"]:
        chunk = b.get("mean_chunk_itl_ms", b.get("mean_itl_ms")) if b["side"] == "probe" \
            else b.get("mean_itl_ms")
        lines.append(f"| {b['index']} | {b['side']} | {b['start_s']:.1f} | {b['mean_ms']:.3f} "
                     f"| {chunk:.3f} |")
    lines += ["", "pair diffs (probe / bench - 1): "
              + ", ".join(pct(d) for d in p["pair_diffs"]),
              "ABBA quad diffs: " + ", ".join(pct(d) for d in p["quad_diffs"]),
              f"per token: mean {pct(p['mean_diff'])} ({p['confidence']:.0%} CI over "
              f"{p['ci_basis']} "
              f"{pct(p['ci_low'])} .. {pct(p['ci_high'])}), median {pct(p['median_diff'])}, "
              f"pooled {pct(p['pooled_diff'])}, first pair alone {pct(p['first_pair_diff'])}; "
              f"balanced {p['balanced']}; within 3%: {p['agrees_3pct']}",
              f"per chunk: mean {pct(pc['mean_diff'])}, median {pct(pc['median_diff'])}, "
              f"pooled {pct(pc['pooled_diff'])}"]
    if doc.get("stopped"):
        lines.append(f"stopped early: {doc['stopped']}")
    return "\n".join(lines) + "\n"


def concurrent_summary(doc: dict[str, Any]) -> str:
    """The concurrent stage's result as markdown: every round, then the comparison per C."""
    lines = [f"# concurrent peer check (bench and probe at the same time), in {doc['in']} / out "
             f"{doc['out']}, enforce_eager {doc['enforce_eager']}, requests per probe round "
             f"{doc['block_requests']} (bench: C more)", "",
             "| c | round | bench start-up s | probe ms/token | bench inside ms/token (n) | "
             "bench all | diff | probe chunk ITL | bench inside ITL | chunk diff | coverage |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in doc["rounds"]:
        inside = "-" if x["inside_tpot_ms"] is None else f"{x['inside_tpot_ms']:.3f}"
        itl = "-" if x["inside_itl_ms"] is None else f"{x['inside_itl_ms']:.3f}"
        lines.append(f"| {x['concurrency']} | {x['round']} | {x['bench_startup_s']:.1f} | "
                     f"{x['probe_itl_ms']:.3f} | {inside} ({x['n_inside']}/{x['n_bench']}) | "
                     f"{x['bench_tpot_all_ms']:.3f} | {pct(x['diff'])} | "
                     f"{x['probe_chunk_itl_ms']:.3f} | {itl} | {pct(x['chunk_diff'])} | "
                     f"{x['coverage']:.3f} |")
    warm = [(k, c, x) for k, srv in enumerate(doc.get("servers", []))
            for c, x in srv.get("warm_round", {}).items()]
    if warm:
        lines += ["", "Discarded warm-up rounds (one per C on each new server, before its first "
                  "measured round; not in the comparison):", ""]
        lines += [f"- server {k}, c={c}: probe {x['probe_itl_ms']:.3f}, bench all "
                  f"{x['bench_tpot_all_ms']:.3f} ms/token, diff {pct(x['diff'])}; longest bench "
                  f"TTFT {x['bench_max_ttft_s']:.3f} s, chunk gap {x['bench_max_gap_s']:.3f} s, "
                  f"probe TTFT {x['probe_max_ttft_ms'] / 1000:.3f} s" for k, c, x in warm]
    stalled = [(k, c, x) for k, s in enumerate(doc.get("servers", []))
               for c, x in s.get("stalled_round", {}).items()]
    if stalled:
        lines += ["", "Measured rounds discarded and run again (the warm round made no mixed "
                  "batch; the stall came later):", ""]
        lines += [f"- server {k}, c={c}: diff {pct(x['diff'])}; {x['why']}"
                  for k, c, x in stalled]
    for c, r in doc.get("results", {}).items():
        lines += ["", f"c={c}: {r['n_rounds']} rounds, per token mean {pct(r['mean_diff'])} "
                  f"({r['confidence']:.0%} CI {pct(r['ci_low'])} .. {pct(r['ci_high'])}), "
                  f"median {pct(r['median_diff'])}, pooled {pct(r['pooled_diff'])}; per chunk "
                  f"mean {pct(r['chunk_mean_diff'])} (CI {pct(r['chunk_ci_low'])} .. "
                  f"{pct(r['chunk_ci_high'])}); against bench's own all-request means "
                  + ", ".join(pct(d) for d in r["diffs_all"])
                  + f"; min coverage {r['min_coverage']:.3f}; within 3%: {r['agrees_3pct']}, "
                  f"CI inside ±3%: {r['resolved_3pct']}"]
    if doc.get("stopped"):
        lines += ["", f"stopped early: {doc['stopped']}"]
    return "\n".join(lines) + "\n"
