"""scripts/gpu_mtp_run.py's parts (issue 16's GPU runs; the entry and its stages list stay
in that file): ``common`` (the settings, the log, raw HTTP capture, the GPU sampler),
``run`` (``Run``: the work folders, servers, and the env, model, A, diag, B, sweep and
compare stages), ``peer_stages`` (the checks against ``vllm bench serve``: peer,
peer_interleaved, peer_concurrent)."""
