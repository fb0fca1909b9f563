"""What is asked of a running server: the decode probe (``decode.py``, over ``sse.py`` and
``counts.py``), prompts cut with its tokenizer (``prompt.py``), its /metrics
(``metrics.py``), a closed-loop load (``load.py``), vLLM's own benchmarks
(``vllm_bench.py``) and the peer checks against them (``peer*.py``)."""
