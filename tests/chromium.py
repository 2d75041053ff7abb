"""Debian's Chromium, driven by Playwright (never a downloaded browser), for the tests
that open pages: the console's (tests/service) and the audit report's (tests/replay).

Without Chromium or Playwright those tests are skipped with one line saying why; under
CI (``CI=true``) they fail instead, so CI cannot pass without them.
"""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def need_chromium() -> None:
    """Skip (or, under CI, fail) the calling test when the browser cannot run."""
    reason = ""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        reason = "Debian's chromium is not installed (apt-get install chromium)"
    else:
        try:
            from playwright.sync_api import expect
        except ImportError:
            reason = "playwright is not installed (pip install -e '.[test]')"
        else:
            # Playwright's assertions wait 5 s by default: too short for a page fed by
            # a server and a worker on a loaded 2-core machine. Waits end when the
            # condition holds; the deadline only bounds a real failure.
            expect.set_options(timeout=30_000)
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the browser test: {reason}")
        pytest.skip(reason)
