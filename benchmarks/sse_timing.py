"""Why the probe reads SSE itself: receive times per data line vs httpx-sse's per event.

    python3 -m pip install httpx-sse && python3 benchmarks/sse_timing.py

A real HTTP server on 127.0.0.1 sends each ``data:`` line and, ``--gap`` seconds later, the
blank line that ends the event (as a proxy or a split TCP segment can). httpx-sse yields an
event when its blank line arrives, so a stamp taken at each yielded event lags the data by
the gap; the probe's own reader (``vllm_bisect.probes.sse.iter_events``) stamps each line as
it arrives. Measured here (gap 0.1 s): httpx-sse 110-156 ms late, per line 0.2-0.6 ms.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time

import httpx

from vllm_bisect.probes.sse import iter_events


def _serve(sock: socket.socket, gap: float, sent: list[float]) -> None:
    while True:
        conn, _ = sock.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")

        def chunk(b: bytes, c: socket.socket = conn) -> None:
            c.sendall(b"%x\r\n%s\r\n" % (len(b), b))

        sent.clear()
        for i in range(3):
            sent.append(time.perf_counter())
            chunk(b'data: {"i": %d}\n' % i)
            time.sleep(gap)
            chunk(b"\n")
        chunk(b"data: [DONE]\n\n")
        chunk(b"")
        conn.close()


def _lags(got: list[float], sent: list[float]) -> list[float]:
    return [round((g - t) * 1e3, 1) for g, t in zip(got, sent, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gap", type=float, default=0.1)
    gap = ap.parse_args().gap
    from httpx_sse import connect_sse

    sent: list[float] = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    threading.Thread(target=_serve, args=(sock, gap, sent), daemon=True).start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    with httpx.Client() as client:
        with connect_sse(client, "GET", url) as es:
            got = [time.perf_counter() for ev in es.iter_sse() if ev.data != "[DONE]"]
        print("httpx-sse lag per event (ms):", _lags(got, sent))
        with client.stream("GET", url) as r:
            own = [e.t for e in iter_events(r.iter_lines()) if e.data is not None]
        print("per-line lag per event (ms): ", _lags(own, sent))


if __name__ == "__main__":
    main()
