"""Every spec key with its type, default and help, derived from the pydantic models.

The help of a key is its field's description where it has one (a symptom's own threshold:
its ``Key`` in ``symptoms/``), else the comment its model's source gives it (the ``#`` lines
just above the field, else the comment at the end of its line; a model made from
declarations reads its bases' source), so ``vllm-bisect spec --keys`` lists what the code
says, never a copy that drifts. :func:`did_you_mean` suggests the key closest to a
misspelt one.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, get_args

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

FIELD = re.compile(r"^\s+(?P<name>[a-z_][a-z0-9_]*)\s*:[^#]*?(?:#\s?(?P<tail>.*))?$")
COMMENT = re.compile(r"^\s+#\s?(?P<text>.*)$")


@dataclass(frozen=True)
class SpecKey:
    key: str          # section.name (build keys: build.name)
    type: str
    default: str
    help: str
    kinds: tuple[str, ...] = ()   # build keys: the build kinds that have it


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """field name -> its comment in the source of the class or its bases (one line of text)."""
    out: dict[str, str] = {}
    for cls in model.__mro__:
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            for name, text in _own_comments(cls, model).items():
                out.setdefault(name, text)
    return out


def _own_comments(cls: type[BaseModel], model: type[BaseModel]) -> dict[str, str]:
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}   # (a model made by create_model has no source of its own)
    out: dict[str, str] = {}
    above: list[str] = []
    for line in lines:
        if m := COMMENT.match(line):
            above.append(m.group("text").strip())
            continue
        if (m := FIELD.match(line)) and m.group("name") in model.model_fields:
            text = " ".join(above) if above else (m.group("tail") or "")
            out.setdefault(m.group("name"), text.strip())
        above = []
    return out


def _type(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " | ".join(repr(m.value) for m in annotation)
    text = getattr(annotation, "__name__", None) if not get_args(annotation) else None
    text = text or str(annotation)
    return re.sub(r"\b(?:typing|vllm_bisect\.[\w.]+)\.", "", text).replace("NoneType", "None")


def _default(field: Any) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
        return "(a section)" if isinstance(value, BaseModel) else repr(value)
    if field.default is PydanticUndefined:
        return "(required)"
    value = field.default
    return repr(getattr(value, "value", value))


def _section(prefix: str, model: type[BaseModel]) -> list[SpecKey]:
    notes = _comments(model)
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += _section(f"{prefix}{name}.", ann)
            continue
        nested = [a for a in get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)]
        keys.append(SpecKey(f"{prefix}{name}", _type(ann), _default(field),
                            field.description or notes.get(name, "")))
        for sub in nested:
            keys += _section(f"{prefix}{name}.", sub)
    return keys


@functools.cache
def spec_keys(root: type[BaseModel]) -> tuple[SpecKey, ...]:
    """Every key of a spec file (``root``: the spec model, ``spec.BisectSpec``; passed in, so
    this module does not import the spec it describes), section by section (build: the union
    of every kind's)."""
    from vllm_bisect.spec.build import BUILD_MODELS

    out: list[SpecKey] = []
    for section, field in root.model_fields.items():
        if section == "build":
            merged: dict[str, SpecKey] = {}
            for kind, model in BUILD_MODELS.items():
                for k in _section("build.", model):
                    old = merged.get(k.key)
                    kinds = (*(old.kinds if old else ()), kind.value)
                    merged[k.key] = SpecKey(k.key, k.type, k.default, (old.help if old and
                                            old.help else k.help), kinds)
            kinds = tuple(k.value for k in BUILD_MODELS)
            default = root().build.kind.value  # type: ignore[attr-defined]
            merged["build.kind"] = SpecKey("build.kind", " | ".join(map(repr, kinds)),
                                           repr(default), "how each commit is made servable; "
                                           "the other build keys depend on it", kinds)
            out += merged.values()
        elif isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            out += _section(f"{section}.", field.annotation)
    return tuple(out)


def did_you_mean(key: str, root: type[BaseModel]) -> str | None:
    """The spec key closest to ``key`` (``serve.arg`` -> ``serve.args``), if one is close."""
    known = [k.key for k in spec_keys(root)]
    if key in known:
        return None
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    if close:
        return close[0]
    leaf = key.rsplit(".", 1)[-1]   # the right name in another section
    by_leaf = {k.rsplit(".", 1)[-1]: k for k in known}
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.8)
    return by_leaf[close[0]] if close else None
