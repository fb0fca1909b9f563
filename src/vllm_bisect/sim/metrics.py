"""vLLM's Prometheus metrics, with vLLM 0.25.1's names, help texts, labels and buckets."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
LABELS = ("engine", "model_name")


class EngineMetrics:
    """The subset of vLLM's metrics that a probe reads, exposed exactly as vLLM does."""

    def __init__(self, model: str, spec_k: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.spec_k = spec_k
        self.lv = {"engine": "0", "model_name": model}
        if spec_k:
            self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                                  LABELS, registry=r)
            self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens",
                                        "Number of draft tokens.", LABELS, registry=r)
            self.accepted = Counter("vllm:spec_decode_num_accepted_tokens",
                                    "Number of accepted tokens.", LABELS, registry=r)
            self.per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                   "Accepted tokens per draft position.", (*LABELS, "position"),
                                   registry=r)
            for lbl in (self.drafts, self.draft_tokens, self.accepted):
                lbl.labels(**self.lv)
            for pos in range(spec_k):
                self.per_pos.labels(**self.lv, position=str(pos))
        self.running = Gauge("vllm:num_requests_running",
                             "Number of requests in model execution batches.", LABELS, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting",
                             "Number of requests waiting to be processed.", LABELS, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                                     LABELS, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.", LABELS,
                                         registry=r)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               ("engine", "finished_reason", "model_name"), registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", LABELS,
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", LABELS,
                             buckets=ITL_BUCKETS, registry=r)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", LABELS,
                              buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.", LABELS,
                             buckets=E2E_BUCKETS, registry=r)
        for m in (self.running, self.waiting, self.prompt_tokens, self.generation_tokens,
                  self.ttft, self.itl, self.tpot, self.e2e):
            m.labels(**self.lv)
        for reason in ("stop", "length", "abort", "error"):
            self.success.labels(engine="0", finished_reason=reason, model_name=model)

    def on_step(self, tokens: int, drafted: int, accepted: int, gap_s: float | None) -> None:
        self.generation_tokens.labels(**self.lv).inc(tokens)
        if gap_s is not None:
            # vLLM observes ITL once per engine step (per verify step under MTP), not per token.
            self.itl.labels(**self.lv).observe(gap_s)
        if self.spec_k and drafted:
            self.drafts.labels(**self.lv).inc()
            self.draft_tokens.labels(**self.lv).inc(drafted)
            self.accepted.labels(**self.lv).inc(accepted)
            for pos in range(accepted):
                self.per_pos.labels(**self.lv, position=str(pos)).inc()

    def on_finish(self, reason: str, prompt_tokens: int, n_tokens: int, ttft_s: float,
                  e2e_s: float) -> None:
        self.prompt_tokens.labels(**self.lv).inc(prompt_tokens)
        self.success.labels(engine="0", finished_reason=reason,
                            model_name=self.lv["model_name"]).inc()
        self.ttft.labels(**self.lv).observe(ttft_s)
        self.e2e.labels(**self.lv).observe(e2e_s)
        if n_tokens > 1:
            self.tpot.labels(**self.lv).observe((e2e_s - ttft_s) / (n_tokens - 1))

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
