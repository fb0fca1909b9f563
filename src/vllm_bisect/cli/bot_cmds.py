"""``vllm-bisect bot serve`` (the GitHub bot: its webhook is ``POST /webhook``) and ``bot
try`` (the bot end to end against a local GitHub stand-in: no network, no GitHub app)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from vllm_bisect.cli.app import app, command, fail, out, setup_logging, typer_app
from vllm_bisect.errors import BisectError

bot_app = typer_app("The GitHub bot that runs bisects on request.")
app.add_typer(bot_app, name="bot")


@command("serve", on=bot_app)
def bot_serve(
    config: Annotated[Path, typer.Option(help="bot config (TOML)")],
) -> None:
    """Serve the webhook (POST /webhook, X-Hub-Signature-256 verified; GET /healthz) and run
    queued bisects."""
    from vllm_bisect.bot import load_config, serve
    from vllm_bisect.bot.app import HEALTH_PATH, WEBHOOK_PATH

    setup_logging(False)
    try:
        cfg = load_config(config)
        cfg.secret()
        base = f"http://{cfg.host}:{cfg.port}"
        out().print(f"webhook: POST {base}{WEBHOOK_PATH} (GitHub: Payload URL, content type "
                    f"application/json, secret ${cfg.webhook_secret_env}; events: issue "
                    f"comments, issues); health: GET {base}{HEALTH_PATH}", markup=False,
                    soft_wrap=True)
        serve(cfg)
    except BisectError as e:
        fail(e)


@command("try", on=bot_app)
def bot_try(
    workdir: Annotated[Path | None, typer.Option(
        help="put the history, the bot's config, state and log here (default: a new "
             "temporary directory)")] = None,
    timeout: Annotated[float, typer.Option(help="seconds the bisect may take")] = 900.0,
) -> None:
    """Try the bot end to end, offline: a synthetic history, a local GitHub stand-in, a real
    `bot serve`, and one signed `/bisect good=... bad=...` comment delivered to its webhook;
    prints each step and the bot's comments as the issue would show them."""
    from vllm_bisect.bot.trial import try_bot

    setup_logging(False)
    root = workdir or Path(tempfile.mkdtemp(prefix="vllm-bisect-bot-try-"))
    o = out()

    def step(text: str) -> None:
        o.print(f"- {text}", markup=False, highlight=False, soft_wrap=True)

    shown: dict[int, str] = {}

    def comment(cid: int, body: str) -> None:   # an edit that appends: the new lines only
        before, shown[cid] = shown.get(cid), body
        if before is not None and body.startswith(before.rstrip()):
            added = body[len(before.rstrip()):].strip()
            if added:
                o.print(added, markup=False, highlight=False, soft_wrap=True)
            return
        what = "posted" if before is None else "edited"
        o.print(f"\n--- the bot {what} its comment #{cid} on the issue ---", markup=False)
        o.print(body.strip(), markup=False, highlight=False, soft_wrap=True)

    try:
        t = try_bot(root, step, comment, timeout_s=timeout)
    except BisectError as e:
        fail(e)
    found = ("the planted commit" if t.first_bad == t.planted else
             f"not the planted commit {t.planted[:12]}")
    o.print(f"\nthe bot named {t.first_bad[:12] if t.first_bad else 'no commit'} ({found}); "
            f"config {t.config}, log {t.log}, work directory {t.workdir}", markup=False,
            soft_wrap=True)
    if t.first_bad != t.planted:
        raise typer.Exit(1)
