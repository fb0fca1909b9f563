"""The two endpoints' environments, told before the search.

When the endpoints differ in more than vLLM itself (torch, flashinfer, triton, ...), the
regression may be a dependency's, and a maintainer wants to know that before the search
spends its server starts: :class:`EndpointEnvEvents` sits around the run's event handler and,
right before the first search step, passes one line on (``on_phase``; the CLI prints it)
from the artifacts this run prepared for the endpoints (a venv read in place, an image's
packages listed by one short container run: :mod:`vllm_bisect.builders.packages`). It never
builds: an endpoint served from the result cache has no artifact here, and no line is told.
Under ``auto`` on a cap the good endpoint is lazy (bisect/recheck.py: it runs only when the
search judges no commit good): then the line comes as soon as the good side is known, from
the first commit the search judges good, named as the reference.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.bisect.endpoint_doc import EndpointEnvDoc, env_doc
from vllm_bisect.bisect.events import EventHandler
from vllm_bisect.bisect.forecast_events import SEARCH_ROLES
from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.builders.packages import artifact_packages, beyond_vllm, changed
from vllm_bisect.models import Evaluation, Outcome, Verdict
from vllm_bisect.runtime.base import Artifact
from vllm_bisect.spec.build import ArtifactKind
from vllm_bisect.text import plural

logger = logging.getLogger(__name__)
SHOWN = 6   # changed packages named in the line, at most


def _change(name: str, old: str | None, new: str | None) -> str:
    return f"{name} {old or '(absent)'} -> {new or '(absent)'}"


@dataclass(frozen=True)
class EndpointEnv:
    """The endpoints' packages (None: not visible) and why one is not."""

    good: dict[str, str] | None
    bad: dict[str, str] | None
    notes: tuple[str, ...] = ()

    def line(self, session: Path | str, good: str = "") -> str | None:
        """What the user is told (None: nothing worth a line). ``good``: the good side when
        it is not the good endpoint (a lazy good endpoint: the first commit judged good)."""
        subject = (f"the environments of {good} and the bad endpoint" if good
                   else "the endpoints' environments")
        if self.good is None or self.bad is None:
            images = [n for n in self.notes if n.startswith("image ")]
            return f"{subject} not compared: {'; '.join(images)}" if images else None
        changes = changed(self.good, self.bad)
        beyond = beyond_vllm(changes)
        if beyond:
            named = [_change(*c) for c in changes if c[0] in beyond]
            more = f", and {len(beyond) - SHOWN} more" if len(beyond) > SHOWN else ""
            return (f"{subject} differ in more than vLLM ({', '.join(named[:SHOWN])}{more}): "
                    f"see `vllm-bisect deps {session}`")
        if not changes:
            return f"{subject}: the same {plural(len(self.good), 'package')}"
        others = [_change(*c) for c in changes if c[0] != "vllm"]
        vllm = [_change(*c) for c in changes if c[0] == "vllm"]
        if not others:
            return f"{subject} differ in vLLM only ({vllm[0]})"
        return (f"{subject}: {vllm[0] if vllm else 'vllm the same'}; also "
                f"{', '.join(others[:SHOWN])} (none of torch, flashinfer, triton or the like)")


def endpoint_env(artifacts: Mapping[str, Artifact], good: str, bad: str) -> EndpointEnv | None:
    """The two endpoints' packages from their artifacts (None: an endpoint has none here)."""
    a, b = artifacts.get(good), artifacts.get(bad)
    if a is None or b is None:
        return None
    if a.kind in (ArtifactKind.COMMAND, ArtifactKind.URL) and a.venv is None:
        return EndpointEnv(None, None, (f"a {a.kind.value} artifact: its packages are not "
                                        "visible",))
    (pa, na), (pb, nb) = artifact_packages(a), artifact_packages(b)
    return EndpointEnv(pa, pb, tuple(n for n in (na, nb) if n))


class EndpointEnvEvents:
    """An event handler around another: passes everything on, and before the first search
    step tells the endpoints' environment diff (once a run)."""

    def __init__(self, inner: EventHandler, artifacts: Mapping[str, Artifact],
                 session: Path) -> None:
        self.inner, self.artifacts, self.session = inner, artifacts, session
        self.rng: CommitRange | None = None
        self.told = False
        self.waiting = False   # the good side not known yet (a lazy good endpoint)
        self.env: EndpointEnv | None = None
        self.good, self.reference = "", ""   # the good side, as told
        self.line: str | None = None

    def on_range(self, rng: CommitRange) -> None:
        if self.rng is None:
            self.rng = rng   # the first search's range: the run's endpoints
        self.inner.on_range(rng)

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        if not self.told and not self.waiting and role in SEARCH_ROLES and self.rng is not None:
            good, bad = self.rng.good.sha, self.rng.bad.sha
            if good not in self.artifacts and bad in self.artifacts:
                self.waiting = True   # the lazy good endpoint: the first commit judged good
            else:
                self._tell(good, bad, "")
        self.inner.on_testing(commit, role, steps_left)

    def _tell(self, good: str, bad: str, reference: str) -> None:
        self.told, self.good, self.reference = True, good, reference
        self.env = endpoint_env(self.artifacts, good, bad)
        self.line = self.env.line(self.session, reference) if self.env is not None else None
        if self.line is not None:
            logger.info("%s", self.line)
            self.inner.on_phase("", self.line)

    def doc(self, evaluations: Mapping[str, Evaluation]) -> EndpointEnvDoc | None:
        """result.json's ``endpoint_env``: what was told, with the VLLM_* variables and the
        platform of each side's measurement (None: the run never reached a search step)."""
        if self.rng is None:
            return None
        good, bad, env = self.good or self.rng.good.sha, self.rng.bad.sha, self.env
        packages = (env.good, env.bad) if env is not None else None
        return env_doc(packages, (evaluations.get(good), evaluations.get(bad)), good=good,
                       bad=bad, judged_good=bool(self.reference),
                       notes=env.notes if env is not None else (), line=self.line,
                       session=self.session)

    def on_phase(self, commit: str, phase: str) -> None:
        self.inner.on_phase(commit, phase)

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        self.inner.on_outcome(commit, outcome)
        if self.waiting and not self.told and self.rng is not None \
                and outcome.verdict is Verdict.GOOD and commit.sha in self.artifacts:
            self._tell(commit.sha, self.rng.bad.sha, f"{commit.sha[:12]} (judged good)")
