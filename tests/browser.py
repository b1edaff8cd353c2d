"""Headless Chromium (Debian's `chromium`), driven over its DevTools protocol through a pipe
(--remote-debugging-pipe: commands on its fd 3, answers on its fd 4, each a JSON message ended
by a NUL). No port, no driver, no Python package beyond the standard library.

    with Browser(timeout=30) as b:
        page = b.open(Path("report.html"))
        assert page.evaluate("document.title").startswith("netcheck")
        assert page.problems() == []      # console errors, exceptions, requests off this file

Every wait is bounded by the timeout given; a browser that does not answer fails the test.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

WINDOW = (1280, 1600)


def chromium() -> str | None:
    return shutil.which("chromium")


def _above_4(fd: int) -> int:
    """The same pipe end at a descriptor above 4: were Chromium's end of one pipe at 3 or 4, the
    shell's redirections would put one pipe over the other."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5)
    os.close(fd)
    return moved


class BrowserError(RuntimeError):
    """The browser did not answer in time, or answered with an error."""


class Browser:
    def __init__(self, timeout: float):
        self.timeout = timeout
        self.profile = tempfile.TemporaryDirectory(prefix="netcheck-chromium-")
        commands, self._to_browser = os.pipe()
        self._from_browser, answers = os.pipe()
        commands, answers = _above_4(commands), _above_4(answers)
        # bash puts the pipe's ends where Chromium looks for them (fd 3 and 4); dash, Debian's sh,
        # takes no descriptor above 9 in a redirection.
        argv = ["bash", "-c", f'exec "$@" 3<&{commands} 4>&{answers}', "bash", chromium(), "--headless",
                "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--remote-debugging-pipe",
                f"--user-data-dir={self.profile.name}", f"--window-size={WINDOW[0]},{WINDOW[1]}"]
        self.proc = subprocess.Popen(argv, pass_fds=(commands, answers), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands)
        os.close(answers)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self.profile.cleanup()

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        """One command; its result, once the browser answers it (events meanwhile are kept)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise BrowserError(f"{method}: the browser is gone (exit code {self.proc.poll()})") from None
        answer = self._until(lambda m: m.get("id") == self._next_id, timeout or self.timeout, method)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def wait_for(self, method: str, session: str, timeout: float | None = None) -> dict:
        """The first event `method` of the session, kept or still to come."""
        def wanted(m: dict) -> bool:
            return m.get("method") == method and m.get("sessionId") == session
        kept = next((e for e in self.events if wanted(e)), None)
        return kept or self._until(wanted, timeout or self.timeout, method)

    def _until(self, wanted, timeout: float, what: str) -> dict:
        end = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if wanted(message):
                    return message
                if "method" in message:
                    self.events.append(message)
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError(f"no answer to {what} in {timeout:g} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError(f"the browser closed its pipe while waiting for {what}")
            self._buffer += chunk

    def open(self, path: Path) -> Page:
        """A new tab showing the file, once its load event has fired."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        started = time.monotonic()
        self.send("Page.navigate", {"url": path.resolve().as_uri()}, session)
        self.wait_for("Page.loadEventFired", session)
        return Page(self, session, time.monotonic() - started)


class Page:
    def __init__(self, browser: Browser, session: str, load_seconds: float):
        self.browser = browser
        self.session = session
        self.load_seconds = load_seconds     # navigation to the load event

    def evaluate(self, expression: str):
        """The expression's value in the page (JSON-able); a thrown exception fails."""
        answer = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": True}, self.session)
        if "exceptionDetails" in answer:
            raise BrowserError(f"{expression[:80]}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def problems(self) -> list[str]:
        """What a reader would see go wrong: exceptions, console errors and warnings, and any
        request for something other than this file itself."""
        self.evaluate("0")   # every event before this answer has arrived
        found = []
        for e in self.browser.events:
            if e.get("sessionId") != self.session:
                continue
            method, params = e["method"], e["params"]
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: {params['args']}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(f"log: {params['entry']['text']}")
            elif method == "Network.requestWillBeSent" and not params["request"]["url"].startswith("file:"):
                found.append(f"request: {params['request']['url'][:200]}")
        return found

    def screenshot(self, path: Path) -> Path:
        """The viewport as a PNG."""
        data = self.browser.send("Page.captureScreenshot", {"format": "png"}, self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
