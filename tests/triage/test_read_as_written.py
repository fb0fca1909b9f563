"""What `vllm-bisect triage` marks "read" is what the reporter wrote (issue 51, issue 50 item 5):
vLLM's dotted flags, a form pasted twice, placeholders left in, ends given as wheel URLs and
image tags, measurements that look like versions, server commands other than `vllm serve`,
ROCm's build kind, tensor parallel sizes that disagree, the output cap as written. Each through
the CLI, on a body filed with the form or written as free text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vllm_bisect.triage.form.fields import LABELS, PLACEHOLDERS, Field, form_yaml

SHA_A = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
SHA_B = "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"


def form(**answers: str) -> str:
    """A body as GitHub renders the regression form (keys: the fields' ids, "-" as "_")."""
    parts = []
    for f, label in LABELS.items():
        value = answers.get(f.value.replace("-", "_"), "")
        if f is Field.SYMPTOMS:
            value = value or "- [X] ITL: decoding is slower per output token (ITL / TPOT)"
        elif f in (Field.SERVE, Field.PROBE) and value:
            value = f"```shell\n{value}\n```"
        parts.append(f"### {label}\n\n{value or '_No response_'}\n")
    return "\n".join(parts)


def triage_cli(tmp_path: Path, body: str) -> tuple[dict[str, Any], str]:
    """(`triage --json`'s document, `triage`'s text) for ``body``."""
    report = tmp_path / "report.md"
    report.write_text(body)
    out = []
    for extra in (["--json"], []):
        r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "triage", str(report),
                            *extra], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        out.append(r.stdout)
    return json.loads(out[0]), out[1]


def reads(doc: dict[str, Any], what: str) -> list[dict[str, Any]]:
    return [r for r in doc["read"] if r["what"].split(" ")[0] == what]


def test_the_last_copy_of_the_form_wins_and_both_are_named(tmp_path: Path) -> None:
    first = form(last_good="v0.10.0", first_bad="v0.10.1", model="Qwen/Qwen3-8B")
    second = form(last_good="v0.10.1", first_bad="v0.10.2", model="Qwen/Qwen3-14B")
    body = first + "\nEdit: wrong versions above, use the corrected form below.\n\n" + second
    doc, _ = triage_cli(tmp_path, body)
    assert (doc["good"], doc["bad"], doc["model"]) == ("v0.10.1", "v0.10.2", "Qwen/Qwen3-14B")
    for what in ("range.good", "range.bad", "model"):
        r = reads(doc, what)
        assert len(r) == 1 and r[0]["source"] == "read", (what, r)
        assert r[0]["line"] > first.count("\n"), r   # from the second copy
    n = first.count("\n")
    warning = next(w for w in doc["warnings"] if "holds the form 2 times" in w)
    assert f"lines 1-{n - 1}" in warning or "lines 1-" in warning
    assert "superseded" in warning
    # the superseded ends are not candidates the free-text reader offers
    assert "v0.10.0" not in json.dumps(doc["candidates"])


def test_placeholders_left_in_are_not_read(tmp_path: Path) -> None:
    body = form(last_good=PLACEHOLDERS[Field.GOOD], first_bad=PLACEHOLDERS[Field.BAD],
                model=PLACEHOLDERS[Field.MODEL], serve_command=PLACEHOLDERS[Field.SERVE],
                hardware=PLACEHOLDERS[Field.HARDWARE],
                details="Llama went from v0.9.1 (fine) to v0.9.2 (slow); meta-llama/Llama-3.1-8B")
    doc, _ = triage_cli(tmp_path, body)
    assert not [r for r in doc["read"] if r["source"] == "read" and r["what"].split(" ")[0] in (
        "range.good", "range.bad", "model", "serve", "hardware")], doc["read"]
    assert doc["good"] != "v0.10.2" and doc["model"] != "Qwen/Qwen3-8B"
    assert sum("placeholder" in w for w in doc["warnings"]) >= 4
    # one answer alone that equals its example is the reporter's own (a real 2x H100, TP=2)
    doc, text = triage_cli(tmp_path, form(last_good="v0.10.1", first_bad="v0.10.2",
                                          model="Qwen/Qwen3-8B",
                                          hardware="2x H100 80GB, TP=2"))
    hw = reads(doc, "hardware")[0]
    assert hw["source"] == "read" and hw["value"] == "H100 TP=2"
    assert doc["spec"]["parallel"] == {"gpus_per_probe": 2}
    assert doc["spec"]["serve"]["args"] == ["--tensor-parallel-size", "2"]
    assert "read hardware: H100 TP=2" in text


def test_hardware_tp_is_what_the_field_says_and_a_conflict_is_a_warning(tmp_path: Path) -> None:
    doc, _ = triage_cli(tmp_path, form(last_good="v0.10.1", first_bad="v0.10.2",
                                       model="Qwen/Qwen3-8B", hardware="2x H100 80GB, TP=2",
                                       serve_command="vllm serve Qwen/Qwen3-8B -tp 4"))
    assert reads(doc, "hardware")[0]["value"] == "H100 TP=2"
    assert doc["spec"]["serve"]["args"] == ["--tensor-parallel-size", "4"]   # what runs
    assert any("Hardware' says TP=2" in w and "--tensor-parallel-size 4" in w
               for w in doc["warnings"]), doc["warnings"]
    # free text: "TP=4" against --tensor-parallel-size 2 is said, never silently chosen
    doc, _ = triage_cli(tmp_path, "ITL regression v0.10.1 -> v0.10.2 on H100 TP=4\n\n"
                        "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2\n")
    assert doc["hardware"]["tensor_parallel"] == 2
    assert any("'TP=4'" in w and "--tensor-parallel-size 2" in w for w in doc["warnings"])
    # one size said twice is no conflict
    doc, _ = triage_cli(tmp_path, "ITL regression v0.10.1 -> v0.10.2 on H100 TP=2\n\n"
                        "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2\n")
    assert not any(w.startswith("tensor parallel") for w in doc["warnings"])


def test_the_cap_is_the_number_written(tmp_path: Path) -> None:
    for cap, max_tokens in ((256, 1024), (128, 1024), (512, 2048)):
        doc, text = triage_cli(tmp_path, "Output length regression v0.10.1 -> v0.10.2 on "
                               f"Qwen/Qwen3-8B: every generation stops at {cap} tokens.\n")
        assert doc["cap_tokens"] == cap and doc["spec"]["probe"]["max_tokens"] == max_tokens
        assert f"reported cap of {cap} tokens" in text


def test_ends_given_as_wheel_urls_and_image_tags(tmp_path: Path) -> None:
    good = (f"https://wheels.vllm.ai/{SHA_A}/vllm-0.11.1rc3.dev12%2Bg{SHA_A[:9]}"
            "-cp38-abi3-manylinux1_x86_64.whl")
    bad = (f"https://wheels.vllm.ai/{SHA_B}/vllm-0.11.1rc3.dev40%2Bg{SHA_B[:9]}"
           "-cp38-abi3-manylinux1_x86_64.whl")
    body = (f"## ITL regression between two wheels\n\nGood: `pip install {good}`\n"
            f"Bad: `pip install {bad}`\n\nOn H100, Qwen/Qwen3-8B, TPOT 7.9 ms -> 9.6 ms.\n")
    doc, _ = triage_cli(tmp_path, body)
    assert (doc["good"], doc["bad"]) == (SHA_A, SHA_B)
    assert "9.6" not in json.dumps(doc["points"]) and "7.9" not in json.dumps(doc["points"])
    # the form: a wheel URL (the commit only in the file name's %2B local version), an image tag
    doc, _ = triage_cli(tmp_path, form(
        last_good=f"https://example.org/whl/vllm-0.11.1rc3.dev12%2Bg{SHA_A[:9]}-cp38-abi3-"
                  "manylinux1_x86_64.whl",
        first_bad=f"vllm/vllm-openai:nightly-{SHA_B[:12]}", model="Qwen/Qwen3-8B",
        details="TPOT 7.9 ms -> 9.6 ms"))
    assert (doc["good"], doc["bad"]) == (SHA_A[:9], SHA_B[:12])
    assert all(r["source"] == "read" for r in reads(doc, "range.good") + reads(doc, "range.bad"))
    # numbers in prose are measurements, never ends
    doc, _ = triage_cli(tmp_path, "Slower decoding after upgrading vllm from 0.10.1 to 0.10.2 "
                        "on H100: TPOT 7.9 -> 9.6 ms, throughput 1.2 -> 0.9 req/s\n")
    assert (doc["good"], doc["bad"]) == ("v0.10.1", "v0.10.2")


def test_a_rocm_report_is_not_given_cuda_wheels(tmp_path: Path) -> None:
    doc, text = triage_cli(tmp_path, form(last_good="v0.10.1", first_bad="v0.10.2",
                                          model="Qwen/Qwen3-8B", hardware="8x MI300X, ROCm 6.4"))
    assert doc["spec"]["build"] == {"kind": "source"}
    assert "chose build.kind = source: MI300X: an AMD GPU" in text and "CUDA builds" in text


def test_the_forms_dropdown_default_is_one_of_its_options() -> None:
    """GitHub refuses a dropdown whose `default` is not an index of its options (the schema
    cannot say it: it is a rule across two fields)."""
    def errors(doc: dict[str, Any]) -> list[str]:
        out = []
        for item in doc["body"]:
            if item["type"] != "dropdown":
                continue
            attrs = item["attributes"]
            default, options = attrs.get("default"), attrs["options"]
            if default is not None and not (type(default) is int and 0 <= default < len(options)):
                out.append(f"{item['id']}: default {default!r} is not an index of its options")
            if len(set(options)) != len(options):
                out.append(f"{item['id']}: options repeat")
        return out

    doc = yaml.safe_load(form_yaml())
    assert errors(doc) == []
    search = next(i for i in doc["body"] if i.get("id") == "search")
    for bad in (2, -1, "0"):
        search["attributes"]["default"] = bad
        assert errors(doc), bad
    # the placeholders the reader knows are the form's own
    by_id = {i["id"]: i for i in yaml.safe_load(form_yaml())["body"] if "id" in i}
    assert {f: by_id[f.value]["attributes"]["placeholder"] for f in PLACEHOLDERS} == PLACEHOLDERS


def test_near_form_variants_never_give_a_wrong_value_marked_read(tmp_path: Path) -> None:
    """Answers that are not exactly one value are guessed (and said); a label with a colon is
    still its field; a serve command giving the speculative config twice is a guess."""
    ends = {"last_good": "v0.10.1", "first_bad": "v0.10.2", "model": "Qwen/Qwen3-8B"}
    cases: list[tuple[dict[str, str], str, str | None]] = [
        ({"last_good": "v0.10.1 (tested 2 days ago)"}, "range.good", None),
        ({"first_bad": "v0.10.2, also v0.10.3"}, "range.bad", None),
        ({"model": "Qwen/Qwen3-8B (FP8)"}, "model", None),
        ({"hardware": "H100 (also seen on A100), TP 4"}, "hardware", "H100 TP=4"),
        ({"hardware": "8x H100, TP=4 or TP=8"}, "hardware", "H100 TP=4"),
        ({"serve_command": "vllm serve Qwen/Qwen3-8B --speculative-config "
          "'{\"method\": \"eagle3\", \"num_speculative_tokens\": 4}' "
          "--speculative-config.num_speculative_tokens 2"}, "speculative", None),
    ]
    for change, what, value in cases:
        doc, _ = triage_cli(tmp_path, form(**{**ends, **change}))
        got = reads(doc, what)
        assert got and all(r["source"] == "guessed" for r in got), (change, got)
        if value is not None:
            assert got[0]["value"] == value and "several" in got[0]["why"], got
        assert any("not one" in w or "several" in w or "both as JSON" in w
                   for w in doc["warnings"]) or "several" in got[0]["why"], doc["warnings"]
    doc, _ = triage_cli(tmp_path, form(**ends).replace("### Model\n", "### Model:\n"))
    assert reads(doc, "model")[0]["source"] == "read"
