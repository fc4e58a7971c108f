"""Headless Chromium for tests: Debian's /usr/bin/chromium driven by Playwright.

    with open_page() as page:
        page.goto(url)
        wait_for_polls(page, 1)
        operators(page)   # {"0.3": "Map", ...}

Never downloads a browser: Playwright is pointed at the system Chromium, which
``make test`` installs (apt-get) along with the ``playwright`` package. A missing
one is an error naming what to install, never a skip.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
WAIT_MS = 20_000


class BrowserMissing(RuntimeError):
    """Chromium or Playwright is not installed."""


def require_browser() -> None:
    """Raises BrowserMissing naming what to install when Chromium or Playwright is absent."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as err:
        raise BrowserMissing(
            "the browser tests need Playwright for Python: `.venv/bin/pip install playwright` "
            "(or `make test`, which installs the test extra)") from err
    if not os.access(CHROMIUM, os.X_OK):
        raise BrowserMissing(
            f"the browser tests need Debian's Chromium at {CHROMIUM}: `apt-get install -y chromium` "
            "(or `make test`, which installs it)")


@contextmanager
def open_page(width: int = 1440, height: int = 1000) -> Iterator["Page"]:
    """A fresh page in a headless Chromium with its own temporary profile.

    The page records uncaught JavaScript errors and console errors in ``page.js_errors``
    (a list of str).
    """
    require_browser()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": width, "height": height})
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.js_errors = []
            page.on("pageerror", lambda error: page.js_errors.append(str(error)))
            page.on("console", lambda message: _record_console_error(page, message))
            yield page
        finally:
            context.close()


def _record_console_error(page, message) -> None:
    # Chromium logs each failed request as a console error too; those are the server's doing.
    if message.type == "error" and not message.text.startswith("Failed to load resource"):
        page.js_errors.append(message.text)


def polls(page) -> int:
    """How many polls of cluster.json the status page has shown."""
    return int(page.get_attribute("body", "data-polls") or 0)


def wait_for_polls(page, n: int, timeout_ms: int = WAIT_MS) -> int:
    """Waits until the status page has shown its n-th successful poll; returns the count."""
    page.wait_for_function("n => Number(document.body.dataset.polls) >= n", arg=n,
                           timeout=timeout_ms)
    return polls(page)


def wait_for_fresh_poll(page, timeout_ms: int = WAIT_MS) -> int:
    """Waits until the page shows a poll that started after this call.

    The poll after the current one may already have been sent, so it is the one after that.
    """
    return wait_for_polls(page, polls(page) + 2, timeout_ms)


def operators(page) -> dict[str, str]:
    """The operators drawn: id -> the name shown in its box."""
    return page.eval_on_selector_all(
        "[data-operator]",
        "els => Object.fromEntries(els.map(e => [e.dataset.operator,"
        " e.querySelector('.op-name').textContent]))")


def workers(page) -> list[int]:
    """The workers that have a bar in some bins chart, sorted."""
    shown = page.eval_on_selector_all("[data-worker]", "els => els.map(e => e.dataset.worker)")
    return sorted({int(w) for w in shown})


def processes(page) -> dict[int, bool]:
    """The processes listed: index -> up."""
    rows = page.eval_on_selector_all(
        "[data-process]", "els => els.map(e => [e.dataset.process, e.dataset.up])")
    return {int(index): up == "true" for index, up in rows}


def channel_rates(page) -> dict[str, float | None]:
    """Each channel's rate label (records/s) by its key "from:port>to:port"; None when blank."""
    rates = page.eval_on_selector_all(
        "[data-channel]",
        "els => els.map(e => [e.dataset.channel, e.querySelector('.rate').getAttribute('data-rate')])")
    return {key: None if rate is None else float(rate) for key, rate in rates}


def screenshot(page, path: str | os.PathLike) -> Path:
    """The whole page as a PNG at path."""
    path = Path(path)
    page.screenshot(path=str(path), full_page=True)
    return path
