"""The ``vllm-bisect`` console script: the command line, imported under a guard.

``git bisect run`` reads exit 1 as "bad". A CLI that cannot even be imported (a broken or
half-upgraded environment: a dependency missing or failing at import) would exit 1 from the
interpreter and name a wrong first bad commit. So the import happens here, where a failure
exits with the hook's abort status for ``vllm-bisect hook`` (128: ``git bisect run`` stops)
and 1 for the other commands, with the cause and a hint, never a traceback.
"""

from __future__ import annotations

import sys

EXIT_ABORT = 128   # the hook's abort (vllm_bisect.cli.app.EXIT_ABORT, not imported: see above)


def main() -> None:
    try:
        from vllm_bisect.cli.main import main as cli_main
    except Exception as err:   # every import failure, whatever raised it
        hook = sys.argv[1:2] == ["hook"]
        sys.stderr.write(
            f"vllm-bisect: cannot start: {type(err).__name__}: {err}\n"
            "hint: this environment's vllm-bisect or one of its dependencies is broken; "
            "reinstall it (pip install -e . in a checkout, or pip install vllm-bisect)"
            + (f"; exit {EXIT_ABORT} stops `git bisect run` here (exit 1 would mark the "
               "commit bad)\n" if hook else "\n"))
        sys.exit(EXIT_ABORT if hook else 1)
    cli_main()


if __name__ == "__main__":
    main()
