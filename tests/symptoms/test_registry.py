"""The symptoms' registry (issue 52 item 1): each symptom is declared once, in its module of
``vllm_bisect.symptoms``, and registered by one line; every list, rule table and dispatch
derives from it. A hand-kept collection of symptom names anywhere else in src/ fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vllm_bisect
from vllm_bisect.spec import JUDGES, PER_REQUEST, Strategy, VerdictSpec, parse_spec
from vllm_bisect.spec.keys import spec_keys
from vllm_bisect.spec.verdict import AUTO_STRATEGY
from vllm_bisect.symptoms import SCREENED, TABLE, Noise, Symptom, by_key
from vllm_bisect.triage import symptom_words as triage_words
from vllm_bisect.triage import symptoms as triage_symptoms
from vllm_bisect.triage.form.fields import FORM_FILE, SYMPTOM_OPTIONS, SYMPTOM_TEXT, form_yaml
from vllm_bisect.verdict import symptoms as table_symptoms

SRC = Path(vllm_bisect.__file__).parent
KEYS = {s.value for s in Symptom} | {i.key for i in SCREENED}
MEMBERS = {s.name for s in Symptom} | {i.key.upper() for i in SCREENED}
# collections that hold symptom words for another reason than listing symptoms, each with why
# (path under src/vllm_bisect, the function or class that holds it)
ALLOWED = {
    # the registry itself
    ("symptoms/any_of.py", "<module>"),   # `any` covers length and itl: its declaration
    # the simulator's own vocabulary (fields of `vllm bench` results it writes)
    ("sim/bench.py", "_one"),
    # what a report's prose says: triage reads words, not symptoms (a speed already read)
    ("triage/symptoms.py", "find_symptoms"),
}


def symptom_words(node: ast.expr) -> set[str]:
    """The symptom named by an element: a key string, or ``Symptom.X`` / ``Found.X``."""
    if isinstance(node, ast.Constant) and node.value in KEYS:
        return {str(node.value)}
    if (isinstance(node, ast.Attribute) and node.attr in MEMBERS
            and isinstance(node.value, ast.Name) and node.value.id in ("Symptom", "Found")):
        return {node.attr.lower()}
    return set()


def hand_kept_lists(path: Path) -> list[tuple[int, str, list[str]]]:
    """Literal tuples, lists, sets, dict keys and enum-like classes (their members' values)
    holding two or more symptom names: (line, the enclosing function or class, the names)."""
    tree = ast.parse(path.read_text(), str(path))
    out = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            where = node.name
        elts: list[ast.expr] = []
        if isinstance(node, ast.ClassDef):   # an enum of symptoms: its members' values
            elts = [b.value for b in node.body if isinstance(b, ast.Assign)]
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        names = set().union(*(symptom_words(e) for e in elts)) if elts else set()
        if len(names) >= 2:
            out.append((node.lineno, where, sorted(names)))  # type: ignore[attr-defined]
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "<module>")
    return out


def test_no_hand_kept_list_of_symptoms_outside_the_registry() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, where, names in hand_kept_lists(path):
            if (rel, where) not in ALLOWED:
                found.append(f"{rel}:{line} ({where}): {names}")
    assert not found, ("hand-kept lists of symptoms (derive them from vllm_bisect.symptoms): "
                       + "; ".join(found))


def test_the_scan_sees_a_hand_kept_list(tmp_path: Path) -> None:
    # the test can fail: the lists issue 52 found (bot/policy.py, verdict/symptoms.py)
    f = tmp_path / "m.py"
    f.write_text('SYMPTOMS = ("length", "itl", "correctness", "any")\n'
                 "def f(s):\n    return s in (Symptom.ITL, Symptom.TTFT)\n"
                 'CAPS = {"itl": 1, "acceptance": 2}\nONE = ("itl",)\n'
                 'class Kind(StrEnum):\n    A = "memory"\n    B = "crash"\n')
    assert [(line, names) for line, _, names in hand_kept_lists(f)] == [
        (1, ["any", "correctness", "itl", "length"]), (3, ["itl", "ttft"]),
        (4, ["acceptance", "itl"]), (6, ["crash", "memory"])]


def test_each_symptom_is_one_module_and_its_member_named_by_its_key() -> None:
    for s in Symptom:
        assert s.info.key == s.value and s.name == s.value.upper().replace("-", "_")
        assert by_key(s.value) is s.info
    modules = {p.stem for p in (SRC / "symptoms").glob("*.py")} - {"__init__", "base", "plain"}
    assert len(modules) == len(Symptom) + len(SCREENED)


def test_the_rule_table_derives_from_the_declarations() -> None:
    for s in Symptom:
        want = {Noise.DETERMINISTIC: Strategy.THRESHOLD, Noise.FLAKY: Strategy.BAYES}.get(
            s.info.noise, Strategy.CHANGEPOINT)
        assert AUTO_STRATEGY[s] is want
        assert (s in JUDGES[Strategy.CHANGEPOINT]) >= (s.info.samples is not None)
        assert (s in JUDGES[Strategy.TWOLEVEL]) == (s.info.samples is not None)
        assert (s in PER_REQUEST) == (s.info.noise is Noise.SERVER_AND_REQUEST)
    assert JUDGES[Strategy.SEQUENTIAL] == (Symptom.ITL,)
    assert set(JUDGES[Strategy.TWOLEVEL]) == {Symptom.ITL, Symptom.TTFT, Symptom.THROUGHPUT,
                                              Symptom.MTP_SPEEDUP}


@pytest.mark.parametrize("symptom", list(Symptom))
def test_the_validator_asks_for_what_each_symptom_needs(symptom: Symptom) -> None:
    needs = [n for n in symptom.info.needs if not n.threshold_only]
    spec = {"verdict": {"symptom": symptom.value, "strategy": "threshold"},
            "probe": {"temperature": 0.5, "send_max_tokens": False}}
    if needs or any(n.threshold_only for n in symptom.info.needs):
        with pytest.raises(Exception, match=f'verdict.symptom = "{symptom.value}" needs'):
            parse_spec(spec)
    else:
        assert parse_spec(spec).verdict.symptom is symptom


def test_the_report_table_has_a_column_per_declared_screen() -> None:
    assert tuple(i.key for i in TABLE) == table_symptoms.SYMPTOMS
    assert {"length", "itl", "ttft", "acceptance", "correctness", "crash"} <= set(
        table_symptoms.SYMPTOMS)


def test_every_key_a_declaration_names_is_a_spec_key() -> None:
    # a typo in a declaration (a need, a factor, a value triage writes) would go unnoticed:
    # Need.met() reads a missing key as unset
    spec = parse_spec({})
    for s in Symptom:
        i = s.info
        dotted = [k.strip("[]") for n in i.needs for k in n.keys]
        dotted += [f"verdict.{k}" for k in (*i.tunable, *([i.factor_key] if i.factor_key else []))]
        dotted += [k for k, _, _ in i.triage_defaults]
        for key in dotted:
            section, _, name = key.partition(".")
            owner = getattr(spec, section)
            for part in name.split("."):
                assert part in type(owner).model_fields, (s.value, key)
                owner = getattr(owner, part)


# -- what a symptom owns is declared in its module: its [verdict] thresholds, its triage words
# [verdict] keys a symptom's declaration names that are not its own, each with why
SHARED_KEYS = {
    # the output-token floor: the probe's (probe.min_tokens, max_tokens) and every judge's
    # (output_token_floor()), not the length symptom's alone
    "min_output_tokens",
}
OWNED = {k.name: s for s in Symptom for k in s.info.keys}


# the bases of the spec's pydantic models (a dataclass's field of the same name is another
# thing: triage's reading of a ratio, the simulator's plan, the report's screen)
SPEC_BASES = {"BaseModel", "_Model", "_VerdictCommon"}


def fields_named(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """Fields of a spec model (``name: type = ...``) and ``Key(...)`` declarations naming one
    of ``names`` in ``path``: (line, name)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ClassDef) and SPEC_BASES & {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}:
            out += [(b.lineno, b.target.id) for b in node.body if isinstance(b, ast.AnnAssign)
                    and isinstance(b.target, ast.Name) and b.target.id in names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "Key" and node.args and isinstance(node.args[0], ast.Constant)
              and node.args[0].value in names):
            out.append((node.lineno, str(node.args[0].value)))
    return out


def test_every_threshold_a_symptom_names_is_declared_by_it() -> None:
    for s in Symptom:
        i = s.info
        named = [k.removeprefix("verdict.") for n in i.needs for k in n.keys
                 if k.startswith("verdict.")]
        named += [*i.tunable, *([i.factor_key] if i.factor_key else [])]
        named += [k.removeprefix("verdict.") for k, _, _ in i.triage_defaults
                  if k.startswith("verdict.")]
        for key in named:
            assert key in SHARED_KEYS or OWNED.get(key) in (s, *(Symptom(c) for c in i.covers)), (
                f"verdict.{key} (named by {s.value}) is not declared in its module's keys")
    # the spec has each declared key once, with the declaration's bounds, default and help
    listed = {k.key: k for k in spec_keys(type(parse_spec({})))}
    for name, s in OWNED.items():
        key = next(k for k in s.info.keys if k.name == name)
        field = VerdictSpec.model_fields[name]
        assert field.default == key.default and field.description == key.help
        assert listed[f"verdict.{name}"].help == key.help


def test_no_symptom_threshold_is_declared_outside_its_module() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, name in fields_named(path, set(OWNED)):
            owner = OWNED[name].info.key.replace("-", "_")
            if rel != f"symptoms/{owner}.py":
                found.append(f"{rel}:{line}: {name} (symptoms/{owner}.py declares it)")
    assert not found, "a symptom's threshold declared outside its module: " + "; ".join(found)


def test_the_threshold_scan_sees_a_field_in_the_spec(tmp_path: Path) -> None:
    # the test can fail: VerdictSpec as it was before issue 52 held ttft_factor / max_ttft_ms
    f = tmp_path / "verdict.py"
    f.write_text("class VerdictSpec(_Model):\n    symptom: Symptom = Symptom.ANY\n"
                 "    ttft_factor: float | None = Field(default=None, gt=1.0)\n"
                 "X = Key('max_ttft_ms', 'help')\n")
    assert fields_named(f, set(OWNED)) == [(3, "ttft_factor"), (4, "max_ttft_ms")]


def alternatives(pattern: str) -> list[str]:
    """A pattern's alternatives at its top level (``a|(?:b|c)|d`` -> a, (?:b|c), d)."""
    out, depth, start, escaped = [], 0, 0, False
    for i, c in enumerate(pattern):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
    return [*out, pattern[start:]] if pattern else out


def word_pieces() -> dict[str, Symptom]:
    """Each declared triage word -> its symptom: a form label, a whole pattern, and each
    alternative of a pattern that is regular-expression text (20 characters or more, with
    an escape, a class or a group: prose such as "first token" may be said anywhere)."""
    out: dict[str, Symptom] = {}
    for s in Symptom:
        if (w := s.info.words) is None:
            continue
        out[w.form] = s
        for pattern in filter(None, (w.metric, w.said, w.unless, w.alone)):
            out[pattern] = s
            out |= {a: s for a in alternatives(pattern)
                    if len(a) >= 20 and any(c in a for c in "\\[(")}
    return out


def copies_of_words(path: Path, pieces: dict[str, Symptom]) -> list[tuple[int, str]]:
    """String literals in ``path`` holding a declared triage word: (line, the word)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out += [(node.lineno, p) for p in pieces if p in node.value]
    return out


def test_no_triage_word_of_a_symptom_is_kept_outside_its_module() -> None:
    pieces = word_pieces()
    assert "TTFT: the first token takes longer" in pieces and "first token" not in pieces
    assert r"(?<![\w.-])prefill(?![\w-]|\.\w)" in pieces
    found = [f"{path.relative_to(SRC).as_posix()}:{line}: {word!r}"
             for path in sorted(SRC.rglob("*.py")) if path.parent.name != "symptoms"
             for line, word in copies_of_words(path, pieces)]
    # the form's file holds no checkbox of a symptom: form_yaml() writes them in
    form_file = (SRC / "triage" / "form" / FORM_FILE).read_text()
    found += [f"triage/form/{FORM_FILE}: {w.form!r}" for s in Symptom
              if (w := s.info.words) is not None and w.form in form_file]
    assert not found, "a symptom's triage words kept outside its module: " + "; ".join(found)


def test_the_word_scan_sees_a_copy(tmp_path: Path) -> None:
    # the test can fail: triage's own TTFT patterns before issue 52
    f = tmp_path / "m.py"
    f.write_text('TTFT = re.compile(r"(?<![\\w.-])prefill(?![\\w-]|\\.\\w)|prompt processing")\n'
                 'TEXT = {"ttft": "TTFT: the first token takes longer"}\n')
    assert copies_of_words(f, word_pieces()) == [
        (1, r"(?<![\w.-])prefill(?![\w-]|\.\w)"), (2, "TTFT: the first token takes longer")]


def test_triage_reads_what_each_symptom_declares() -> None:
    metrics = dict(triage_symptoms.METRICS)
    said = {s for s, *_ in triage_words.SAID}
    alone = {s: means for s, _, means in triage_words.ALONE}
    for s in Symptom:
        w = s.info.words
        assert (s in SYMPTOM_TEXT) == (w is not None), s
        if w is None:
            continue
        assert SYMPTOM_TEXT[s] == w.form and SYMPTOM_OPTIONS[w.form.split(":")[0].lower()] is s
        assert w.form in form_yaml()
        assert (metrics[s].pattern if s in metrics else "") == w.metric
        assert (s in said) == bool(w.said)
        assert alone.get(s) == (w.means if w.alone else None)
    # what is triage's own: latency (no probe judges it)
    assert set(metrics) - set(Symptom) == {triage_symptoms.Prose.LATENCY}
