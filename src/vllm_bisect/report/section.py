"""The ``Section`` protocol: a study's section of result.json (isolate, deps, knobs,
explain) is a key, a pydantic model of its document and a render function (Markdown
lines), defined in the study's own package (``isolate/report_section.py``,
``explain/report_section.py``) and registered by its dotted path in
``report.sections.STUDY_SECTIONS``. The studies build their document as the model;
:func:`report.render.write_section` validates it against the section registered under its
key before writing, and the report renders each registered section through its ``render``.

The models declare the fields their render reads (typed; required where the render cannot
do without them) and keep any other key as written (``extra="allow"``): a document is
written back with exactly the keys it was given (:meth:`SectionDoc.document`), so
result.json reads the same as before the models existed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError


class SectionDoc(BaseModel):
    """A study's document, as written into result.json under its section's key."""

    model_config = ConfigDict(frozen=True, extra="allow")

    def document(self) -> dict[str, Any]:
        """The JSON document: the keys it was built with, no defaults added."""
        return self.model_dump(mode="json", exclude_unset=True)


class Section(Protocol):
    """What a study registers for its section of result.json."""

    @property
    def key(self) -> str: ...

    @property
    def model(self) -> type[SectionDoc]: ...

    def render(self, doc: SectionDoc) -> list[str]: ...


@dataclass(frozen=True)
class StudySection:
    """A :class:`Section` whose render reads the document as JSON (the report's renderers
    are functions of the stored result, as ``vllm-bisect report`` reads it back)."""

    key: str
    model: type[SectionDoc]
    lines: Callable[[dict[str, Any]], list[str]]

    def render(self, doc: SectionDoc) -> list[str]:
        return self.lines(doc.document())


def checked(section: Section, doc: SectionDoc | Mapping[str, Any]) -> SectionDoc:
    """``doc`` as ``section``'s model: a mapping is validated against it, a model must be
    that model. Raises ValueError naming the section and what is wrong."""
    if isinstance(doc, SectionDoc):
        if not isinstance(doc, section.model):
            raise ValueError(f"the {section.key!r} section takes a {section.model.__name__}, "
                             f"not a {type(doc).__name__}")
        return doc
    try:
        return section.model.model_validate(dict(doc))
    except ValidationError as err:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}"
                          for e in err.errors())
        raise ValueError(f"the {section.key!r} section is not a valid "
                         f"{section.model.__name__}: {where}") from None
