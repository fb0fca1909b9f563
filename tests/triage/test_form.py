"""The regression issue form: it passes GitHub's issue-forms schema, it and its reader agree,
and a report filed with it is read exactly (issue 44)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.triage.test_corpus import CORPUS, field_ok
from vllm_bisect.triage import Source, comment_markdown, resolve_refs, triage
from vllm_bisect.triage.form.answers import form_model, form_ref
from vllm_bisect.triage.form.fields import (
    FORM_FILE,
    LABELS,
    SEARCH_OPTIONS,
    SYMPTOM_OPTIONS,
    Field,
    form_yaml,
    option_key,
)

ROOT = Path(__file__).parents[2]
SCHEMA = ROOT / "tests" / "fixtures" / "github-issue-forms" / "github-issue-forms.json"
FORMS = Path(__file__).parent / "forms"
EXACT = ("pair", "search", "symptoms", "model")


def form() -> dict[str, object]:
    doc = yaml.safe_load(form_yaml())
    assert isinstance(doc, dict)
    return doc


def schema_errors(doc: object) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]


def test_the_form_passes_githubs_issue_forms_schema() -> None:
    assert schema_errors(form()) == []
    # the check can fail: GitHub refuses a form without a field label, an unknown type, a
    # render mode it does not know, or an id with a space
    for broken in ({"type": "input", "attributes": {}},
                   {"type": "number", "attributes": {"label": "n"}},
                   {"type": "textarea", "attributes": {"label": "x", "render": "nosuchlang"}},
                   {"type": "input", "id": "last good", "attributes": {"label": "x"}}):
        doc = form()
        doc["body"] = [*doc["body"], broken]  # type: ignore[list-item]
        assert schema_errors(doc), broken


def test_the_form_and_its_reader_agree() -> None:
    body = [item for item in form()["body"] if item["type"] != "markdown"]  # type: ignore[union-attr, index]
    assert {item["id"]: item["attributes"]["label"] for item in body} == {
        f.value: label for f, label in LABELS.items()}
    by_id = {item["id"]: item for item in body}
    assert {option_key(o) for o in by_id["search"]["attributes"]["options"]} == set(SEARCH_OPTIONS)
    assert [option_key(o["label"]) for o in by_id["symptoms"]["attributes"]["options"]] == list(
        SYMPTOM_OPTIONS)
    for f in (Field.SERVE, Field.PROBE):
        assert by_id[f.value]["attributes"]["render"] == "shell"
    # this repository ships the same form for its own issues
    assert (ROOT / ".github" / "ISSUE_TEMPLATE" / FORM_FILE).read_text() == form_yaml()


def form_cases() -> list[Path]:
    return sorted(p for p in FORMS.iterdir() if (p / "report.md").is_file())


def test_form_reports_are_read_exactly(capsys: pytest.CaptureFixture[str]) -> None:
    """Good, bad, search kind, symptom set and model of every form-filed report, against the
    corpus report's own labels: 100%, each from a form field (read, not guessed)."""
    cases = form_cases()
    assert len(cases) >= 20
    right = dict.fromkeys(EXACT, 0)
    free = dict.fromkeys(EXACT, 0)
    misses = []
    for case in cases:
        exp = json.loads((CORPUS / case.name / "expected.json").read_text())
        t = triage((case / "report.md").read_text())
        assert t.form, case.name
        for f in EXACT:
            right[f] += field_ok(f, exp, t)
            if not field_ok(f, exp, t):
                misses.append(f"{case.name} {f}: got {t.search.value} {t.good}..{t.bad} "
                              f"{t.symptoms} {t.model or t.local_model}")
        free_t = triage((CORPUS / case.name / "report.md").read_text())
        for f in EXACT:
            free[f] += field_ok(f, exp, free_t)
        sources = {r.what.split(" ")[0]: r.source for r in t.read}
        for what in ("range.good", "range.bad", "search", "symptom", "model"):
            if what == "range.good" and not exp.get("good", exp.get("old")):
                continue  # a culprit PR alone: its parent is the good end
            assert sources.get(what) is Source.READ, (case.name, what, t.read)
    with capsys.disabled():
        print(f"\nform-filed reports read exactly ({len(cases)}): "
              + ", ".join(f"{f} {right[f]}/{len(cases)}" for f in EXACT)
              + "; the free-text reader on the same reports: "
              + ", ".join(f"{f} {free[f]}/{len(cases)}" for f in EXACT))
    assert not misses, misses


@pytest.mark.parametrize(("answer", "ref"), [
    ("0.23.1rc1.dev471 (e312c5cb2)", "e312c5cb2"), ("0.23.1rc1.dev601+ga16dbd5b8", "a16dbd5b8"),
    ("0.11.0rc1.dev32+gc6e156a02.d20251020", "c6e156a02"), ("v0.10.2", "v0.10.2"),
    ("0.10.2", "v0.10.2"), ("vllm==0.9.2", "v0.9.2"), ("vLLM 0.9", "v0.9.0"),
    ("`v0.6.3.post1`", "v0.6.3.post1"), ("e312c5cb2", "e312c5cb2"), ("#59735", "#59735"),
    ("https://github.com/vllm-project/vllm/pull/59735", "#59735"),
    ("https://github.com/vllm-project/vllm/commit/" + "e4294144a8ca4e57da712934dca33f89bef8fe78",
     "e4294144a8ca4e57da712934dca33f89bef8fe78"),
    ("vllm/vllm-openai:v0.18.0", "v0.18.0"), ("vllm/vllm-openai:nightly-a16dbd5b8", "a16dbd5b8"),
    ("nightly-2026-01-15", "nightly-2026-01-15"), ("2026-01-15", "nightly-2026-01-15"),
    ("b9442", "b9442"), ("releases/v0.18.0", "releases/v0.18.0"), ("main", "main"),
    # not one ref: not read (the reader falls back to the text and says so)
    ("0.9.2 or maybe 0.9.1", None), ("2026-02-30", None), ("vllm/vllm-openai:latest", None),
    ("1234567", None), ("v0.10.2)", None), ("the latest one", None), ("", None),
    ("N/A", None), ("unknown", None), ("latest", None), ("nightly", None), ("?", None),
])
def test_a_range_end_is_one_ref_or_nothing(answer: str, ref: str | None) -> None:
    got = form_ref(answer)
    assert (got.ref if got else None) == ref


@pytest.mark.parametrize(("answer", "model", "local"), [
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B", None),
    ("https://huggingface.co/Qwen/Qwen3-8B", "Qwen/Qwen3-8B", None),
    ("/home/llm/Qwen3-8B", "Qwen3-8B", "/home/llm/Qwen3-8B"),
    ("./Qwen2.5-32B-Instruct/", "Qwen2.5-32B-Instruct", "./Qwen2.5-32B-Instruct/"),
    ("glm-5.2-w4afp8", "glm-5.2-w4afp8", None),
    ("Qwen3 8B, or the 14B", None, None), ("unknown", None, None), ("N/A", None, None),
])
def test_a_model_is_one_id_path_or_name(answer: str, model: str | None, local: str | None) -> None:
    got = form_model(answer)
    assert (got.model if got else None, got.local if got else None) == (model, local)


def test_an_answer_that_is_not_one_value_is_guessed_and_said() -> None:
    body = (FORMS / "vllm-09527-attention-time-060-063-opt125m" / "report.md").read_text()
    t = triage(body.replace("\n0.6.3\n", "\n0.6.3 (or 0.6.2, not sure)\n"))
    assert t.form and t.bad == "v0.6.3"   # the free-text reader still finds it, as a guess
    bad = next(r for r in t.read if r.what.startswith("range.bad"))
    good = next(r for r in t.read if r.what.startswith("range.good"))
    assert bad.source is Source.GUESSED and good.source is Source.READ
    assert any("'0.6.3 (or 0.6.2, not sure)' is not one version" in w for w in t.warnings)
    # nothing ticked: the symptoms are guessed from "What you saw", and said so
    body = (FORMS / "founding-47297-en" / "report.md").read_text()
    t = triage(body.replace("- [X] ", "- [ ] "))
    assert sorted(t.symptoms) == ["itl", "length"] and all(
        r.source is Source.GUESSED for r in t.read
        if r.what == "symptom")
    assert any("nothing ticked" in w for w in t.warnings)
    # the form's own words are not the reporter's: a ticked "Speculative decoding: the MTP /
    # draft speed-up is gone" is a symptom, not a speculative config read from the text
    body = (FORMS / "vllm-09527-attention-time-060-063-opt125m" / "report.md").read_text()
    t = triage(body.replace("- [ ] Speculative decoding", "- [X] Speculative decoding"))
    assert sorted(t.symptoms) == ["itl", "mtp-speedup"] and t.speculative is None
    t = triage(body.replace("- [X] ITL", "- [ ] ITL"))
    assert t.symptoms == [] and any("nothing ticked" in w for w in t.warnings)


def test_free_text_is_not_a_form() -> None:
    corpus_report = (CORPUS / "founding-47297-en" / "report.md").read_text()
    t = triage(corpus_report)
    assert not t.form and all(r.source is Source.GUESSED for r in t.read)
    # another project's form (vLLM's bug form) is free text to this reader
    assert not triage("### Your current environment\n\nH100\n\n### 🐛 Describe the bug\n\n"
                      "v0.10.0 is slower than v0.9.2\n").form


def test_the_bot_reply_reads_back_exactly() -> None:
    """A free-text reading, written back in the form's shape (the bot's ready-to-edit reply),
    reads back as the same values, losslessly (issue 51: thresholds, max_tokens, variant, TP,
    hardware); pasted back unedited, a guess stays a guess; an answer the reporter edits is
    read."""
    from vllm_bisect.triage import spec_from_triage

    for name in ("vllm-09527-attention-time-060-063-opt125m", "founding-59520-en",
                 "vllm-15092-073-080-not-enough-memory", "founding-47297-en",
                 "founding-47297-zh"):
        t = triage((CORPUS / name / "report.md").read_text())
        reply = comment_markdown(t, started=False)
        assert "guessed" in reply and "**read**" not in reply
        block = reply.split("````markdown\n", 1)[1].split("\n````", 1)[0]
        back = triage(block)
        assert back.form, name
        assert (back.search, back.good, back.bad, sorted(back.symptoms), back.model,
                back.local_model, back.serve_args, back.speculative, back.cap_tokens,
                back.itl_factor, back.throughput_factor) == (
            t.search, t.good, t.bad, sorted(t.symptoms), t.model, t.local_model, t.serve_args,
            t.speculative, t.cap_tokens, t.itl_factor, t.throughput_factor), name
        assert {k: v for k, v in back.hardware.items()} == t.hardware, name
        spec, spec_back = spec_from_triage(t), spec_from_triage(back)
        assert spec_back == spec, name   # the same spec: probe, verdict, build, parallel
        marked = [r for r in back.read if r.what.split(" ")[0] in (
            "range.good", "range.bad", "search", "symptom", "model")]
        assert marked and all(r.source is Source.GUESSED and "pasted back unedited" in r.why
                              for r in marked), (name, marked)
        # the reporter edits the bad end: that answer is theirs (read); the rest stays guessed
        answer = t.bad_label or t.bad or ""
        edited = triage(block.replace(f"### First bad (fix search: first fixed)\n\n{answer}\n",
                                      "### First bad (fix search: first fixed)\n\nv0.99.0\n", 1))
        if answer:
            bad = next(r for r in edited.read if r.what.startswith("range.bad"))
            assert edited.bad == "v0.99.0" and bad.source is Source.READ, (name, bad)
            assert all(r.source is Source.GUESSED for r in edited.read
                       if r.what.startswith("range.good")), name


def test_the_form_reader_is_linear_on_adversarial_input() -> None:
    from vllm_bisect.triage.form import read_form, split_form
    from vllm_bisect.triage.reading import sentence
    from vllm_bisect.triage.values import Triage

    head = "\n\n".join(f"### {label}\n\nx" for label in LABELS.values())
    nasty = [("### a" + " " * 3990 + "b\n") * 50, head + "\n" + ("- [X] " + "a:" * 1990 + "\n") * 50,
             head.replace("\nx", "\n" + "v0." * 1300), head.replace("\nx", "\n/" + "a/" * 1900),
             head + "\n" + "```\n" * 5000, head.replace("\nx", "\n" + "#1" * 2000)]
    answers = ["vllm " * 800, "v0." * 1300, "#" * 4000, "nightly-" * 500, "a/" * 2000,
               "https://github.com/" + "a/" * 1000, "0.1.2 (" * 500, "+g" * 2000]
    t0 = time.process_time()   # CPU time: a loaded machine does not make it fail
    for text in nasty:
        form = split_form([ln[:4000] for ln in text.splitlines()])
        if form is not None:
            read_form(Triage(), form)
    for a in answers:
        form_ref(a), form_model(a), sentence(a * 2, a[:20])
    assert time.process_time() - t0 < 10  # catastrophic backtracking takes minutes, not seconds


def git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def test_nightly_dates_become_main_commits_of_those_days(tmp_path: Path) -> None:
    import git as gitpython

    repo = tmp_path / "vllm"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    for day, hour in (("2026-01-13", "23:00"), ("2026-01-14", "09:00"), ("2026-01-14", "18:00"),
                      ("2026-01-15", "08:00"), ("2026-01-15", "20:00"), ("2026-01-16", "10:00")):
        git(repo, "commit", "-q", "--allow-empty", "-m", f"{day} {hour}",
            date=f"{day}T{hour}:00+00:00")
        shas[f"{day} {hour}"] = git(repo, "rev-parse", "HEAD")
    body = (FORMS / "vllm-09527-attention-time-060-063-opt125m" / "report.md").read_text()
    body = body.replace("\n0.6.0\n", "\nnightly-2026-01-14\n").replace("\n0.6.3\n", "\n2026-01-15\n")
    t = triage(body)
    assert (t.good, t.bad) == ("nightly-2026-01-14", "nightly-2026-01-15")
    assert any("nightly date: pass --repo" in u for u in t.unknowns)
    resolve_refs(t, gitpython.Repo(repo))
    # the range holds every commit either nightly could have been built from
    assert (t.good, t.bad) == (shas["2026-01-13 23:00"], shas["2026-01-15 20:00"])
    assert not any("nightly date" in u for u in t.unknowns)


def test_a_culprit_pr_alone_is_checked_against_its_parent(tmp_path: Path) -> None:
    import git as gitpython

    from tests.helpers import history

    h = history(tmp_path, n_commits=4)
    repo = gitpython.Repo(h.path)
    subject = str(repo.commit(h.shas[2]).message).splitlines()[0]
    pr = subject.rsplit("(#", 1)[1].rstrip(")")
    body = (FORMS / "vllm-09527-attention-time-060-063-opt125m" / "report.md").read_text()
    t = triage(body.replace("\n0.6.0\n", "\n_No response_\n").replace(
        "\n0.6.3\n", f"\nhttps://github.com/vllm-project/vllm/pull/{pr}\n"))
    assert (t.good, t.bad) == (None, f"#{pr}")
    resolve_refs(t, repo)
    assert (t.good, t.bad) == (h.shas[1], h.shas[2])
    ends = [r for r in t.read if r.what.startswith(("range.good", "range.bad"))]
    assert ends and all(r.source is Source.READ for r in ends), ends


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_triage_form_prints_or_writes_the_form(tmp_path: Path) -> None:
    r = cli("triage", "--form")
    assert r.returncode == 0 and r.stdout == form_yaml(), r.stderr
    out = tmp_path / ".github" / "ISSUE_TEMPLATE" / "regression.yml"
    r = cli("triage", "--form", "--write", str(out))
    assert r.returncode == 0 and out.read_text() == form_yaml()
    assert schema_errors(yaml.safe_load(out.read_text())) == []
    r = cli("triage", "--form", str(tmp_path / "report.md"))
    assert r.returncode == 2 and "--form takes no report" in r.stderr and "Traceback" not in r.stderr
    r = cli("triage")
    assert r.returncode == 2 and "no report given" in r.stderr and "--form" in r.stderr


def test_triage_reads_a_form_report_through_the_cli() -> None:
    report = FORMS / "founding-59520-en" / "report.md"
    r = cli("triage", str(report), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["form"] and doc["spec"]["range"] == {
        "repo": ".", "search": "fix", "good": "21c08ac4589",
        "bad": "e4294144a8ca4e57da712934dca33f89bef8fe78"}
    assert doc["spec"]["probe"]["bench"]["kind"] == "throughput"
    assert {r["what"]: r["source"] for r in doc["read"]}["range.bad (fixed)"] == "read"
    r = cli("triage", str(report))
    assert "  read range.good (has the problem): 21c08ac4589 (line 3): form field" in r.stdout
