"""The ``command`` builder: run ``setup`` in the commit's checkout; ``serve`` starts the server."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from vllm_bisect.builders.base import Artifact, ArtifactKind
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.errors import BuildError
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.process import tail

logger = logging.getLogger(__name__)


class CommandBuilder:
    def __init__(self, checkouts: Checkouts, setup: str | None, serve: str, log_dir: Path,
                 env: dict[str, str] | None = None, timeout_s: float = 3600.0) -> None:
        self.checkouts = checkouts
        self.setup = setup
        self.serve = serve
        self.log_dir = log_dir
        self.env = env or {}
        self.timeout_s = timeout_s

    def prepare(self, commit: str) -> Artifact:
        checkout = self.checkouts.get(commit)
        if self.setup:
            log = self.log_dir / f"setup-{commit[:12]}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            env = child_env({**self.env, "VLLM_BISECT_COMMIT": commit})
            with open(log, "wb") as out:
                try:
                    code = subprocess.run(["/bin/sh", "-c", self.setup], cwd=checkout, env=env,
                                          stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL,
                                          timeout=self.timeout_s).returncode
                except subprocess.TimeoutExpired:
                    code = -1
            if code != 0:
                raise BuildError(f"setup command failed with exit code {code} at {commit[:12]}",
                                 hint=f"see {log}", log_tail=tail(log))
        return Artifact(commit=commit, kind=ArtifactKind.COMMAND, identity=self.serve,
                        checkout=checkout, serve_template=self.serve)
