"""The "Environments of the endpoints" section of report.md/html, from result.json's
``endpoint_env`` (:class:`~vllm_bisect.bisect.endpoint_doc.EndpointEnvDoc`): the packages
that differ, the ``VLLM_*`` variables, GPU / driver / CUDA where known, and the pointer to
``deps`` when more than vLLM differs."""

from __future__ import annotations

from pydantic import ValidationError

from vllm_bisect.bisect.endpoint_doc import Change, EndpointEnvDoc

SHOWN = 12   # changed packages listed, at most


def _change(c: Change) -> str:
    return f"`{c.name}` {c.good or '(absent)'} -> {c.bad or '(absent)'}"


def env_lines(data: object, good_endpoint: str | None = None) -> list[str]:
    """Markdown lines (none when there is no document or it cannot be read). The section
    named for the endpoints compares the endpoints only: when the good endpoint never ran
    (a lazy good endpoint: bisect/recheck.py), the commit judged good that stood in for it
    is named in the heading, not passed off as an endpoint."""
    try:
        d = EndpointEnvDoc.model_validate(data)
    except ValidationError:
        return []
    if d.good_judged:
        endpoint = (f" the good endpoint `{good_endpoint[:12]}` was not run, so its "
                    "environment was not read;" if good_endpoint else "")
        out = ["", f"### Environments of `{d.good[:12]}` (judged good) and the bad endpoint",
               "", f"Not the endpoints:{endpoint} `{d.good[:12]}`, the first commit judged "
               f"good, against `{d.bad[:12]}` (the bad endpoint):", ""]
    else:
        out = ["", "### Environments of the endpoints", "",
               f"`{d.good[:12]}` (good) against `{d.bad[:12]}` (bad):", ""]
    if not d.compared:
        out.append("- packages: not compared")
    elif not d.packages:
        out.append(f"- packages: the same {d.package_counts[0] if d.package_counts else ''} on "
                   "both sides")
    else:
        more = f", and {len(d.packages) - SHOWN} more" if len(d.packages) > SHOWN else ""
        out.append(f"- packages that differ: {', '.join(map(_change, d.packages[:SHOWN]))}{more}")
    if d.deps_command:
        out.append(f"- more than vLLM differs ({', '.join(d.beyond_vllm)}): the regression may "
                   f"be a dependency's; `{d.deps_command}` swaps the pins")
    if d.vllm_vars:
        out.append("- `VLLM_*` variables the servers were given that differ: "
                   + ", ".join(map(_change, d.vllm_vars)))
    else:
        n = d.vllm_vars_same
        out.append(f"- `VLLM_*` variables the servers were given: the same on both sides ({n} "
                   f"variable{'' if n == 1 else 's'})" if n else
                   "- `VLLM_*` variables the servers were given: none on either side")
    where = ", ".join(f"{k} {v}" for k, v in (("GPU", d.gpu), ("driver", d.driver),
                                             ("CUDA", d.cuda)) if v)
    if d.platform:
        out.append(f"- platform that differs: {', '.join(map(_change, d.platform))}")
    elif where:
        out.append(f"- {where} (the same on both sides)")
    out += [f"- {n}" for n in d.notes]
    return out
