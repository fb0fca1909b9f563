"""A server command line as vLLM reads it (triage/argv.py), through `vllm-bisect triage`:
vLLM's dotted JSON flags, `docker run ... IMAGE` and `python -m
vllm.entrypoints.openai.api_server` as server commands, short aliases (issue 51)."""

from __future__ import annotations

from pathlib import Path

from tests.triage.test_read_as_written import form, reads, triage_cli


def test_dotted_speculative_config_is_read_as_vllm_parses_it(tmp_path: Path) -> None:
    serve = ("vllm serve Qwen/Qwen3-8B --speculative-config.method mtp "
             "--speculative_config.num_speculative_tokens {k} --max_model_len 4096")
    for k in (1, 5):
        doc, text = triage_cli(tmp_path, form(last_good="v0.10.1", first_bad="v0.10.2",
                                              model="Qwen/Qwen3-8B",
                                              serve_command=serve.format(k=k)))
        assert doc["speculative"] == {"method": "mtp", "num_speculative_tokens": k}
        spec = reads(doc, "speculative")[0]
        assert spec["source"] == "read" and "assumed" not in spec["why"]
        assert doc["spec"]["serve"]["args"] == ["--max-model-len", "4096"]
        assert "K not stated" not in text
    # the same in free text; the "=" spelling too
    doc, _ = triage_cli(tmp_path, "ITL regression from v0.10.1 to v0.10.2\n\n"
                        "vllm serve Qwen/Qwen3-8B --speculative-config.method=mtp "
                        "--speculative-config.num_speculative_tokens=2\n")
    assert doc["speculative"] == {"method": "mtp", "num_speculative_tokens": 2}
    # MTP named without a config: K is a guess, and says so (never read)
    doc, _ = triage_cli(tmp_path, form(last_good="v0.10.1", first_bad="v0.10.2",
                                       serve_command="vllm serve Qwen/Qwen3-8B  # with MTP"))
    spec = reads(doc, "speculative")[0]
    assert spec["source"] == "guessed" and "assumed 3" in spec["why"]


def test_serve_flags_after_docker_run_and_the_api_server_module(tmp_path: Path) -> None:
    doc, _ = triage_cli(tmp_path, (
        "ITL regression from v0.10.1 to v0.10.2 on H100\n\n"
        "docker run --gpus all -p 8000:8000 --ipc=host -e VLLM_USE_V1=1 "
        "vllm/vllm-openai:v0.10.2 --model Qwen/Qwen3-8B --max-model-len 8192 -tp 2\n"))
    assert doc["model"] == "Qwen/Qwen3-8B"
    assert doc["spec"]["serve"]["args"] == ["--max-model-len", "8192",
                                            "--tensor-parallel-size", "2"]
    assert "docker run vllm/vllm-openai:v0.10.2" in reads(doc, "serve")[0]["why"]
    doc, _ = triage_cli(tmp_path, (
        "ITL regression from v0.10.1 to v0.10.2 on H100\n\n"
        "python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B "
        "--enforce-eager --gpu-memory-utilization 0.85\n"))
    assert doc["model"] == "meta-llama/Llama-3.1-8B"
    assert doc["spec"]["serve"]["args"] == ["--enforce-eager", "--gpu-memory-utilization", "0.85"]
