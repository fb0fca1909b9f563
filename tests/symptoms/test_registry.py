"""The symptoms' registry (issue 52 item 1): each symptom is declared once, in its module of
``vllm_bisect.symptoms``, and registered by one line; every list, rule table and dispatch
derives from it. A hand-kept collection of symptom names anywhere else in src/ fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vllm_bisect
from vllm_bisect.spec import JUDGES, PER_REQUEST, Strategy, parse_spec
from vllm_bisect.spec.verdict import AUTO_STRATEGY
from vllm_bisect.symptoms import SCREENED, TABLE, Noise, Symptom, by_key
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
    # what a report's prose says: triage reads words, not symptoms (a speed already read),
    # in its own vocabulary (``Found``: latency too, which no probe judges)
    ("triage/symptoms.py", "find_symptoms"),
    ("triage/symptoms.py", "Found"),
    # the issue form's checkboxes, in regression.yml's order (tests/triage/test_form.py)
    ("triage/form/fields.py", "<module>"),
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
