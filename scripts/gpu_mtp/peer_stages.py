"""The peer checks against ``vllm bench serve`` (``PeerStages``, mixed into ``Run``, whose
servers, saving and budget they use): peer (session 4: same prompts on both sides),
peer_interleaved (ABBA blocks on one server), peer_concurrent (bench and probe at the
same time)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from gpu_mtp.common import (
    ENV,
    MTP,
    PEER_IN,
    PEER_N1,
    PEER_N4,
    PEER_OUT,
    PROMPT,
    T0,
    GpuSampler,
    log,
)
from vllm_bisect.models import Measurement
from vllm_bisect.probes.decode import DecodeProbe
from vllm_bisect.probes.peer_summary import concurrent_summary, interleaved_summary
from vllm_bisect.probes.peer_summary import pct as _pct
from vllm_bisect.spec import ProbeSpec


class PeerStages:
    # peer check, same prompts on both sides (session 4) --------------------------------
    def bench_cmd(self, h: Any, model: str, name: str, jsonl: Path, conc: int, n: int,
                  warm: int) -> list[str]:
        from vllm_bisect.probes.peer_rounds import bench_serve_argv

        return bench_serve_argv(self.vllm, h.url, model, jsonl, self.peer_out, conc, n, warm,
                                self.res, name)

    def bench(self, h: Any, model: str, name: str, jsonl: Path, conc: int, n: int,
              warm: int) -> dict[str, Any]:
        cmd = self.bench_cmd(h, model, name, jsonl, conc, n, warm)
        r = self.run_saved(cmd, name, 400)
        if r.returncode != 0:
            raise RuntimeError(f"{name}: rc {r.returncode}: {r.stderr[-500:]}")
        return dict(json.loads((self.res / f"{name}.json").read_text()))

    def stage_peer(self) -> None:
        import httpx

        from vllm_bisect.probes.peer import peer_check
        from vllm_bisect.runtime.gpustate import observe, process_tree, read_state

        sampler = GpuSampler()
        sampler.start()
        try:
            with self.server("P", self.work / "mtp", ["--speculative-config", MTP]) as h:
                log(f"P healthy after {h.startup_s:.1f} s")
                model = str(self.work / "mtp")
                doc: dict[str, Any] = {"startup_s": h.startup_s, "in": PEER_IN, "out": PEER_OUT,
                                       "enforce_eager": self.eager}
                sp = ProbeSpec(prompt=PROMPT, prompt_tokens=PEER_IN, max_tokens=PEER_OUT)
                with httpx.Client(timeout=60) as c:
                    sized = DecodeProbe(sp, PEER_OUT).sized_prompt(c, h, PEER_IN)
                assert sized is not None
                text = sized.text
                doc["prompt"] = text
                jsonl = self.work / "peer_prompts.jsonl"
                jsonl.write_text("".join(json.dumps({"prompt": text}) + "\n" for _ in range(64)))
                self.save("peer_prompts.jsonl", jsonl.read_text())

                def probe(conc: int, n: int) -> Any:
                    spec = ProbeSpec(prompt=text, max_tokens=PEER_OUT, requests=n,
                                     min_tokens=self.peer_min_tokens,
                                     concurrency=conc, warmup=0)
                    return DecodeProbe(spec, PEER_OUT).measure(h)

                own = process_tree(h.pid)
                for conc, n, bench_first in ((1, PEER_N1, True),
                                             (4, PEER_N4, self.peer_c4_bench_first)):
                    cell: dict[str, Any] = {}
                    for side in (("bench", "probe") if bench_first else ("probe", "bench")):
                        if side == "bench":
                            # --num-warmups runs full-length warm-ups at --max-concurrency
                            bj = self.bench(h, model, f"peer_bench_c{conc}", jsonl, conc, n,
                                            warm=2 * conc)
                            cell["bench_order"] = len(cell)
                        else:
                            warm = probe(conc, 2 * conc)  # warm-up at the measured concurrency
                            before = read_state()
                            m = probe(conc, n)
                            after = read_state()
                            rec, note = observe(before, after, own)
                            cell["probe_warmup_itl_ms"] = warm.itl_ms
                            cell["probe"] = m.model_dump(mode="json")
                            cell["gpu_state"] = rec
                            cell["gpu_note"] = note
                            cell["probe_order"] = len(cell)
                    pc = peer_check(Measurement.model_validate(cell["probe"]), bj)
                    cell["peer_check"] = {**pc.__dict__, "per_token_diff": pc.per_token_diff,
                                          "per_chunk_diff": pc.per_chunk_diff,
                                          "acceptance_adjusted_diff": pc.acceptance_adjusted_diff,
                                          "agrees_3pct": pc.agrees(0.03)}
                    doc[f"c{conc}"] = cell
                    log(f"peer c={conc}: bench TPOT {pc.bench_tpot_ms:.3f} probe ITL "
                        f"{pc.probe_itl_ms:.3f} ({pc.per_token_diff:+.2%}); chunk "
                        f"{pc.bench_itl_ms:.3f} vs {pc.probe_chunk_itl_ms:.3f} "
                        f"({pc.per_chunk_diff:+.2%})")
                    self.save("peer.partial.json", doc)
                doc["server_pids"] = sorted(own)
        finally:
            sampler.stop()
            self.save("gpustate_samples.json", sampler.samples)
        self.save("peer.json", doc)

    # peer check, interleaved blocks on one server (issue 16, after session 4) ------------
    def stage_peer_interleaved(self) -> None:
        """On one MTP server: a warm-up at the measured concurrency, then PAIRS pairs of blocks
        (bench, probe, probe, bench, ...: ABBA, so a linear drift of the server's speed cancels),
        each block BLOCK_N requests of the same sized prompt; the paired comparison of
        ``probes.peer.paired_peer_check``. Stops before a quad (two pairs) that would not fit
        the budget, so the pairs stay balanced."""
        import httpx

        from vllm_bisect.probes.peer import PeerBlock, PeerSide, abba_order, paired_peer_check
        from vllm_bisect.probes.peer_rounds import (
            block_of_bench,
            block_of_probe,
            pairs_fit,
            prompts_jsonl,
        )

        c = self.pi_conc
        n = self.pi_block_n or max(6, 2 * c)
        tag = f"peer_interleaved{self.mode_tag()}_c{c}"
        sampler = GpuSampler()
        sampler.start()
        try:
            with self.server(tag, self.work / "mtp", ["--speculative-config", MTP]) as h:
                log(f"{tag}: healthy after {h.startup_s:.1f} s")
                model = str(self.work / "mtp")
                doc: dict[str, Any] = {
                    "startup_s": h.startup_s, "concurrency": c, "block_requests": n,
                    "pairs_planned": self.pi_pairs, "in": self.peer_in, "out": self.peer_out,
                    "vllm": self.vllm, "enforce_eager": self.eager, "blocks": []}
                sp = ProbeSpec(prompt=PROMPT, prompt_tokens=self.peer_in, max_tokens=self.peer_out)
                with httpx.Client(timeout=60) as http:
                    sized = DecodeProbe(sp, self.peer_out).sized_prompt(http, h, self.peer_in)
                assert sized is not None
                text = doc["prompt"] = sized.text
                jsonl = self.work / f"{tag}_prompts.jsonl"
                jsonl.write_text(prompts_jsonl(text, max(64, n)))

                def probe(k: int) -> Measurement:
                    spec = ProbeSpec(prompt=text, max_tokens=self.peer_out, requests=k,
                                     min_tokens=self.peer_min_tokens, concurrency=c, warmup=0)
                    return DecodeProbe(spec, self.peer_out).measure(h)

                # warm-up at the measured concurrency, full length (bench blocks then run
                # without warm-ups of their own: --num-warmups 0)
                doc["warmup_itl_ms"] = probe(2 * c).itl_ms
                blocks: list[PeerBlock] = []
                chunk_blocks: list[PeerBlock] = []
                took: dict[PeerSide, list[float]] = {PeerSide.BENCH: [], PeerSide.PROBE: []}
                for i, side in enumerate(abba_order(self.pi_pairs)):
                    stop = pairs_fit(i, took, self.left())
                    if stop is not None:
                        doc["stopped"] = stop
                        log(f"{tag}: {doc['stopped']}")
                        break
                    t0 = time.monotonic()
                    name = f"{tag}_{side.value}{i:02d}"
                    if side is PeerSide.BENCH:
                        blk, chunk, rec = block_of_bench(self.bench(h, model, name, jsonl, c, n,
                                                                    warm=0))
                    else:
                        m = probe(n)
                        self.save(f"{name}.json", m.model_dump(mode="json"))
                        blk, chunk, rec = block_of_probe(m)
                    took[side].append(time.monotonic() - t0)
                    blocks.append(blk)
                    chunk_blocks.append(chunk)
                    doc["blocks"].append({
                        "index": i, "side": side.value, "file": f"{name}.json",
                        "start_s": round(t0 - T0, 2), "end_s": round(time.monotonic() - T0, 2),
                        "mean_ms": blk.mean_ms, "per_request_ms": list(blk.per_request_ms), **rec})
                    log(f"{tag}: block {i} {side.value}: {blk.mean_ms:.3f} ms/token "
                        f"({took[side][-1]:.1f} s)")
                    self.save(f"{tag}.partial.json", doc)
                keep = len(blocks) - len(blocks) % 2
                pp = paired_peer_check(blocks[:keep])
                doc["paired"] = pp.as_dict()
                doc["paired_chunk"] = paired_peer_check(chunk_blocks[:keep]).as_dict()
        finally:
            sampler.stop()
            self.save(f"{tag}_gpustate_samples.json", sampler.samples)
        self.save(f"{tag}.json", doc)
        self.save(f"{tag}_summary.md", interleaved_summary(doc))
        log(f"{tag}: paired mean {pp.mean_diff:+.2%} (CI over {pp.ci_basis} {_pct(pp.ci_low)}.."
            f"{_pct(pp.ci_high)}), median "
            f"{pp.median_diff:+.2%}, pooled {pp.pooled_diff:+.2%}, first pair "
            f"{pp.first_pair_diff:+.2%}, {pp.n_pairs} pairs")

    # peer check, bench and probe AT THE SAME TIME (after session 7) ---------------------
    def sized_peer_prompt(self, h: Any, tag: str, n: int) -> tuple[str, Path]:
        """The peer prompt (``peer_in`` tokens by the server's /tokenize) and bench's custom
        dataset of it."""
        import httpx

        sp = ProbeSpec(prompt=PROMPT, prompt_tokens=self.peer_in, max_tokens=self.peer_out)
        with httpx.Client(timeout=60) as http:
            sized = DecodeProbe(sp, self.peer_out).sized_prompt(http, h, self.peer_in)
        assert sized is not None
        from vllm_bisect.probes.peer_rounds import prompts_jsonl

        jsonl = self.work / f"{tag}_prompts.jsonl"
        jsonl.write_text(prompts_jsonl(sized.text, max(64, n)))
        return sized.text, jsonl

    def concurrent_round(self, h: Any, model: str, name: str, jsonl: Path, c: int, n: int,
                         probe: Any) -> tuple[dict[str, Any], Any]:
        """Start ``vllm bench serve`` (n + c requests at c), wait for its "Starting main
        benchmark run" line, run the probe (n requests at c) at once, then wait for bench.
        Bench's extra wave keeps its load on until the probe's last request is done."""
        from vllm_bisect.probes.peer_rounds import round_record, run_concurrent

        cmd = self.bench_cmd(h, model, name, jsonl, c, n + c, warm=0)
        run = run_concurrent(cmd, {**os.environ, **ENV}, lambda: probe(n), name)
        rc, lines, m = run.rc, run.lines, run.probe
        self.save(f"{name}_stdout.txt", "$ " + " ".join(cmd) + f"\n(rc {rc})\n"
                  + "".join(lines)[-10000:])
        if rc != 0:
            raise RuntimeError(f"{name}: bench rc {rc}: {''.join(lines)[-500:]}")
        self.save(f"{name}_probe.json", m.model_dump(mode="json"))
        rec, rnd = round_record(run, json.loads((self.res / f"{name}.json").read_text()), name)
        return rec, rnd

    def stage_peer_concurrent(self) -> None:
        """On one MTP server, R rounds per concurrency C (the concurrencies interleaved round
        by round): bench at C and the probe at C at the same time on the same prompt, so both
        tools' requests share the engine's steps and the server's drift hits both alike; per
        round probe / bench - 1, then ``probes.peer.concurrent_peer_check`` per C.

        Warm-up, on every new server before the first measured round of each C: 2C full-length
        probe requests at 2C (all starting together: the plain decode shapes), then ONE
        discarded concurrent round, run exactly like a measured one (``concurrent_round``), so
        the mixed batches (a prefill landing while the other tool's requests decode) have been
        seen before a measured round: on a cold CUDA-graphs server their first use stalls the
        engine 0.75-1.9 s (docs/validation.md (g)). It is kept under the server's entry,
        ``servers[k]["warm_round"][C]``, never in ``rounds`` (so ``concurrent_peer_check`` does
        not see it); ``--no-peer-warm-round`` leaves it out. The warm round takes the stalls
        only when its requests made the mixed batches (bench and the probe in lockstep make
        none): a measured round that shows one (``peer_rounds.first_use_stall``) is moved to
        ``servers[k]["stalled_round"][C]`` and run again, once per C and server.

        Resumes from its partial file (rounds from an earlier server are kept: each round is
        self-contained). Stops before a round (warm or measured) that would not fit the budget;
        a warm round only starts when it and a measured round fit."""
        from vllm_bisect.probes.peer import ConcurrentRound, concurrent_peer_check
        from vllm_bisect.probes.peer_rounds import first_use_stall, round_need

        tag = f"peer_concurrent{self.mode_tag()}"
        concs = self.pc_concs
        per_n = {c: self.pi_block_n or max(4, 2 * c) for c in concs}
        partial = self.res / f"{tag}.partial.json"
        doc: dict[str, Any] = json.loads(partial.read_text()) if partial.exists() else {
            "concurrencies": concs, "rounds_planned": self.pc_rounds, "block_requests": per_n,
            "bench_extra_requests": "C (one more wave, so bench's load outlasts the probe)",
            "in": self.peer_in, "out": self.peer_out, "vllm": self.vllm,
            "enforce_eager": self.eager, "servers": [], "rounds": []}
        sampler = GpuSampler()
        sampler.start()
        try:
            with self.server(f"{tag}_s{len(doc['servers'])}", self.work / "mtp",
                             ["--speculative-config", MTP]) as h:
                log(f"{tag}: healthy after {h.startup_s:.1f} s")
                model = str(self.work / "mtp")
                text, jsonl = self.sized_peer_prompt(h, tag, max(per_n.values()) * 2)
                server: dict[str, Any] = {"startup_s": h.startup_s, "warmup_itl_ms": {},
                                          "warm_round": {}, "stalled_round": {}}
                doc["servers"].append(server)
                doc["prompt"] = text

                def probe_at(c: int) -> Any:
                    def run(k: int) -> Measurement:
                        spec = ProbeSpec(prompt=text, max_tokens=self.peer_out, requests=k,
                                         min_tokens=self.peer_min_tokens, concurrency=c,
                                         warmup=0)
                        return DecodeProbe(spec, self.peer_out).measure(h)
                    return run

                took: list[float] = []
                doc.pop("stopped", None)
                # round by round, the concurrencies interleaved; rounds already done skipped
                for r, c in [(r, c) for r in range(self.pc_rounds) for c in concs]:
                    done = sum(1 for x in doc["rounds"] if x["concurrency"] == c)
                    if done > r:
                        continue
                    warm = self.pc_warm_round and str(c) not in server["warm_round"]
                    need = round_need(took, warm)
                    if self.left() < need:
                        doc["stopped"] = (f"before {'the warm round and ' if warm else ''}round "
                                          f"{r} at c={c}: {self.left():.0f} s left < "
                                          f"{need:.0f} s")
                        log(f"{tag}: {doc['stopped']}")
                        break
                    if str(c) not in server["warmup_itl_ms"]:
                        # both tools' load at once: 2C requests at 2C, full length
                        server["warmup_itl_ms"][str(c)] = probe_at(2 * c)(2 * c).itl_ms
                    if warm:
                        # one discarded round, as measured ones run: the mixed batches' first use
                        t = time.monotonic()
                        k = len(doc["servers"]) - 1
                        rec, rnd = self.concurrent_round(h, model, f"{tag}_s{k}_c{c}_warm", jsonl,
                                                         c, per_n[c], probe_at(c))
                        took.append(time.monotonic() - t)
                        server["warm_round"][str(c)] = {"took_s": round(took[-1], 1), **rec}
                        self.save(partial.name, doc)
                        log(f"{tag}: c={c} warm round (discarded): probe {rnd.probe_itl_ms:.3f} "
                            f"bench all {rnd.bench_tpot_all_ms:.3f} ms/token: {rnd.diff:+.2%}, "
                            f"longest bench TTFT {rec['bench_max_ttft_s']:.3f} s, gap "
                            f"{rec['bench_max_gap_s']:.3f} s ({took[-1]:.1f} s)")
                        if self.left() < max(took) + 10.0:
                            doc["stopped"] = (f"after the warm round at c={c}: {self.left():.0f}"
                                              f" s left < {max(took) + 10.0:.0f} s")
                            log(f"{tag}: {doc['stopped']}")
                            break
                    t = time.monotonic()
                    name = f"{tag}_c{c}_r{done:02d}"
                    rec, rnd = self.concurrent_round(h, model, name, jsonl, c, per_n[c],
                                                     probe_at(c))
                    took.append(time.monotonic() - t)
                    why = first_use_stall(rec)
                    if (why and str(c) not in server["stalled_round"]
                            and self.left() >= max(took) + 10.0):
                        # the warm round did not take the stall (no mixed batch in it): this
                        # round is discarded as a second warm round and run again, once
                        gone = f"{tag}_s{len(doc['servers']) - 1}_c{c}_stalled"
                        for f in (rec["bench_file"], rec["probe_file"], f"{name}_stdout.txt"):
                            (self.res / f).rename(self.res / f.replace(name, gone))
                        rec = {**rec, "bench_file": f"{gone}.json",
                               "probe_file": f"{gone}_probe.json"}
                        server["stalled_round"][str(c)] = {"why": why, **rec}
                        self.save(partial.name, doc)
                        log(f"{tag}: c={c} round {done} discarded: {why}; run again")
                        t = time.monotonic()
                        rec, rnd = self.concurrent_round(h, model, name, jsonl, c, per_n[c],
                                                         probe_at(c))
                        took.append(time.monotonic() - t)
                    doc["rounds"].append({"concurrency": c, "round": done,
                                          "server": len(doc["servers"]) - 1,
                                          "took_s": round(took[-1], 1), **rec})
                    self.save(partial.name, doc)
                    inside = rnd.inside_tpot_ms if rnd.inside_tpot_ms is not None else math.nan
                    log(f"{tag}: c={c} round {done}: probe {rnd.probe_itl_ms:.3f} bench inside "
                        f"{inside:.3f} (all {rnd.bench_tpot_all_ms:.3f}) ms/token: "
                        f"{rnd.diff:+.2%}, chunk {rnd.chunk_diff:+.2%}, coverage "
                        f"{rnd.coverage:.3f} ({took[-1]:.1f} s)")
        finally:
            sampler.stop()
            self.save(f"{tag}_gpustate_samples.json", sampler.samples)
        doc["results"] = {}
        for c in concs:
            rounds = [ConcurrentRound.from_dict(x) for x in doc["rounds"] if x["concurrency"] == c]
            if rounds:
                doc["results"][str(c)] = concurrent_peer_check(rounds).as_dict()
        self.save(partial.name, doc)
        self.save(f"{tag}_summary.md", concurrent_summary(doc))
        if any(sum(1 for x in doc["rounds"] if x["concurrency"] == c) < self.pc_rounds
               for c in concs):
            # no final file: the next call resumes from the partial one (with a new server)
            log(f"{tag}: rounds missing (budget); run the stage again to add them")
        else:
            self.save(f"{tag}.json", doc)
        for c, res in doc["results"].items():
            log(f"{tag}: c={c}: mean {res['mean_diff']:+.2%} (CI {_pct(res['ci_low'])}.."
                f"{_pct(res['ci_high'])}), chunk {res['chunk_mean_diff']:+.2%}, "
                f"{res['n_rounds']} rounds, min coverage {res['min_coverage']:.3f}")
