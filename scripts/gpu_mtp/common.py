"""The settings of the GPU runs, their log, raw HTTP capture (the format of
tests/fixtures/vllm-0.25.1/) and the GPU sampler."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
       "DO_NOT_TRACK": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
MAX_LEN = 40960
# FlashInfer is not installed: on SM90 vLLM 0.25.1 would pick FlashInfer's GDN prefill ("auto")
COMMON = ["--max-model-len", str(MAX_LEN), "--enforce-eager", "--gpu-memory-utilization", "0.3",
          "--dtype", "bfloat16", "--additional-config", json.dumps({"gdn_prefill_backend": "triton"})]
MTP = json.dumps({"method": "mtp", "num_speculative_tokens": 3})
PROMPT = "Write a long story about a lighthouse keeper who finds a map."
# the peer check of session 4: same prompt text on both sides, fixed lengths
PEER_IN, PEER_OUT, PEER_N1, PEER_N4 = 256, 256, 12, 24
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


# -- raw HTTP capture (the format of tests/fixtures/vllm-0.25.1/) --------------------------
def capture(port: int, method: str, path: str, body: dict[str, Any] | None,
            timeout: float = 300.0, deadline_s: float = 90.0) -> dict[str, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: raw-capture/1\r\n"
            "Accept: */*\r\nConnection: close\r\n")
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    raw_req = head.encode() + b"\r\n" + payload
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.perf_counter()
    s.sendall(raw_req)
    data, events = b"", []
    truncated = False
    while True:
        if time.perf_counter() - t0 > deadline_s:  # a cap that did not apply: stop reading
            truncated = True
            break
        got = s.recv(65536)
        if not got:
            break
        events.append({"t": round(time.perf_counter() - t0, 6), "nbytes": len(got)})
        data += got
    s.close()
    hdr, _, rest = data.partition(b"\r\n\r\n")
    lines = hdr.decode("latin-1").split("\r\n")
    headers = [tuple(x.split(": ", 1)) for x in lines[1:] if ": " in x]
    chunked = any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers)
    rec: dict[str, Any] = {
        "request": {"method": method, "path": path, "port": port, "body": body,
                    "raw_request": raw_req.decode()},
        "status_line": lines[0], "headers": [list(h) for h in headers],
        "transfer_chunked": chunked, "recv_events": events, "truncated_by_deadline": truncated}
    if truncated:
        rec["raw_response_head"] = data[:20000].decode("utf-8", errors="replace")
        return rec
    body_bytes, sizes = rest, []
    if chunked:
        body_bytes, pos = b"", 0
        while pos < len(rest):
            eol = rest.index(b"\r\n", pos)
            n = int(rest[pos:eol].split(b";")[0], 16)
            sizes.append(n)
            if n == 0:
                break
            body_bytes += rest[eol + 2: eol + 2 + n]
            pos = eol + 2 + n + 2
    rec["http_chunk_sizes"] = sizes
    ctype = dict((k.lower(), v) for k, v in headers).get("content-type", "")
    if "text/event-stream" in ctype:
        # time of each SSE line = time of the recv that delivered its last byte
        header_len = len(hdr) + 4
        ends, acc = [], 0
        for e in events:
            acc += e["nbytes"]
            ends.append((acc, e["t"]))
        sse, raw_pos = [], header_len
        # map body offsets back to raw offsets through the chunk framing
        offsets, pos, body_off = [], 0, 0
        while pos < len(rest) and chunked:
            eol = rest.index(b"\r\n", pos)
            n = int(rest[pos:eol].split(b";")[0], 16)
            if n == 0:
                break
            offsets.append((body_off, header_len + eol + 2))
            body_off += n
            pos = eol + 2 + n + 2
        start = 0
        for line in body_bytes.split(b"\n"):
            end_body = start + len(line)
            raw_end = end_body + raw_pos
            for b_off, r_off in offsets:
                if b_off < end_body:
                    raw_end = r_off + (end_body - b_off)
            t = next((tt for a, tt in ends if a >= raw_end), events[-1]["t"] if events else 0.0)
            if line:
                sse.append({"t": t, "line": line.decode()})
            start = end_body + 1
        rec["sse_lines"] = sse
        rec["analysis"] = analyse(sse)
        if len(data) < 400_000:
            rec["raw_response"] = data.decode("utf-8", errors="replace")
    else:
        rec["body"] = body_bytes.decode("utf-8", errors="replace")
    return rec


def analyse(sse: list[dict[str, Any]]) -> dict[str, Any]:
    chunks, last, final_usage = [], 0, None
    for ev in sse:
        line = ev["line"]
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        obj = json.loads(line[6:])
        ch = obj.get("choices") or []
        usage = obj.get("usage")
        if not ch:
            final_usage = usage
            continue
        c0 = ch[0]
        text = c0.get("text") if "text" in c0 else (c0.get("delta") or {}).get("content")
        entry: dict[str, Any] = {"t": ev["t"], "text": text, "n_words": len((text or "").split()),
                                 "usage": usage, "finish_reason": c0.get("finish_reason")}
        if isinstance(usage, dict):
            entry["completion_tokens_delta"] = usage["completion_tokens"] - last
            last = usage["completion_tokens"]
        chunks.append(entry)
    content = [c for c in chunks if c["text"]]
    deltas = [c.get("completion_tokens_delta") for c in content]
    hist: dict[str, int] = {}
    for d in (deltas if all(d is not None for d in deltas) else [c["n_words"] for c in content]):
        hist[str(d)] = hist.get(str(d), 0) + 1
    return {"n_data_lines": len(sse), "n_content_chunks": len(content),
            "tokens_per_content_chunk_hist": hist, "final_usage": final_usage,
            "chunk_tokens": deltas, "chunks": chunks}


def get(port: int, path: str) -> str:
    import httpx
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=30).text


def vllm_lines(text: str) -> str:
    return "\n".join(x for x in text.splitlines()
                     if x.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:"))) + "\n"


class GpuSampler:
    """``runtime.gpustate.read_state()`` (NVML, else nvidia-smi) every few seconds in a thread,
    plus the nvidia-smi path once, so both sources are seen on the real GPU."""

    def __init__(self, every_s: float = 3.0) -> None:
        import threading
        self.every_s, self.samples = every_s, {"nvml_or_smi": [], "smi_once": None}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        from vllm_bisect.runtime import gpustate as g
        try:
            gpus = g._smi([f"--query-gpu={g.GPU_QUERY}", g.CSV], 10.0)
            apps = g._smi([f"--query-compute-apps={g.APPS_QUERY}", g.CSV], 10.0)
            self.samples["smi_once"] = {"raw_gpus": gpus, "raw_apps": apps}
        except Exception as err:
            self.samples["smi_once"] = {"error": repr(err)}
        while not self._stop.is_set():
            try:
                st = g.read_state()
                self.samples["nvml_or_smi"].append(
                    {"t": round(time.monotonic() - T0, 1),
                     "state": st.as_dict() if st is not None else None})
            except Exception as err:
                self.samples["nvml_or_smi"].append({"error": repr(err)})
            self._stop.wait(self.every_s)

    def start(self) -> None:
        self._t.start()

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=15)
