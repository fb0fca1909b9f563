#!/usr/bin/env python3
"""Cut a vLLM torch-profiler trace down to a few decode steps, for a test fixture.

    python3 scripts/trim_trace.py IN.pt.trace.json[.gz] OUT.pt.trace.json.gz --first N --steps K

Keeps the trace's top-level keys, every metadata event (``ph`` "M": process and thread
names), and the events that start inside the host window of the ``execute_context_...``
step annotations number N to N+K-1 (by time) or that share a correlation id with a kept
launch (the GPU kernels of those steps, which may start after the window).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--first", type=int, default=20)
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    raw = a.src.read_bytes()
    doc = json.loads(gzip.decompress(raw) if a.src.name.endswith(".gz") else raw)
    ev = doc["traceEvents"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation"
                    and str(e.get("name", "")).startswith("execute_context_")),
                   key=lambda e: e["ts"])[a.first:a.first + a.steps]
    lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    inside = [e for e in ev if e.get("ph") != "M" and "ts" in e and lo <= e["ts"] <= hi]
    corr = {e["args"]["correlation"] for e in inside
            if isinstance(e.get("args"), dict) and "correlation" in e["args"]}
    kept = [e for e in ev if e.get("ph") == "M" or (lo <= e.get("ts", -1) <= hi)
            or (isinstance(e.get("args"), dict) and e["args"].get("correlation") in corr)]
    doc["traceEvents"] = kept
    a.dst.write_bytes(gzip.compress(json.dumps(doc).encode(), 9))
    print(f"{len(ev)} -> {len(kept)} events, steps {[s['name'] for s in steps]}, "
          f"{a.dst.stat().st_size} bytes")


if __name__ == "__main__":
    main()
