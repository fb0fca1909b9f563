"""A real headless browser (Debian's chromium) for the report tests: it loads report.html
from the session directory, runs a probe script in the page and hands back what the page
laid out. Skips where chromium is missing, except in CI (.ci/run installs it and sets
VLLM_BISECT_REQUIRE_DOCKER=1): there a missing browser fails the test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-extensions", "--disable-sync", "--disable-default-apps", "--no-first-run",
         "--mute-audio", "--disable-dev-shm-usage", "--disable-component-update",
         "--allow-file-access-from-files")


def chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("VLLM_BISECT_REQUIRE_DOCKER") == "1":
            pytest.fail("chromium is required here (VLLM_BISECT_REQUIRE_DOCKER=1: CI, whose "
                        ".ci/run installs it) but is not on PATH")
        pytest.skip("chromium not installed (apt-get install chromium; .ci/run installs it)")
    return browser


def run(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180, check=False)


def dump_dom(url: str, profile: Path) -> str:
    """The page's DOM after load, as chromium serialises it."""
    r = run("--virtual-time-budget=5000", "--dump-dom", url, profile=profile)
    assert r.stdout.strip(), r.stderr[-2000:]
    return r.stdout


def probe(page: Path, script: str, profile: Path) -> Any:
    """Load ``page`` with ``script`` appended (it must set ``window.probeResult``) beside it,
    so relative links resolve as the page's own; return what the script found."""
    html = page.read_text()
    runner = ("<script>\ntry {\n" + script + "\n} catch (e) { window.probeResult = "
              "{error: String(e)}; }\nconst pre = document.createElement('pre');\n"
              "pre.id = 'probe-result';\npre.textContent = JSON.stringify(window.probeResult);"
              "\ndocument.body.appendChild(pre);\n</script>\n")
    probe_page = page.with_name(f".probe-{page.stem}.html")
    probe_page.write_text(html.replace("</body>", runner + "</body>"))
    try:
        dom = dump_dom(probe_page.as_uri(), profile)
    finally:
        probe_page.unlink()
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    text = m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    found = json.loads(text.replace("&amp;", "&"))
    assert "error" not in found, found
    return found


# what report.html laid out: per plot its axes, points and no-value marks; the log links
LAYOUT = (Path(__file__).parent / "layout.js").read_text()
