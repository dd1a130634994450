"""Headless Chromium for the tests of the pages `testbed serve` and the reports show: a page's
DOM or a screenshot in one command (`browse`), or a page kept open and driven over the
DevTools protocol (`DevTools`)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def browse(url: str, shot: Path | None = None) -> str:
    assert CHROMIUM
    with tempfile.TemporaryDirectory() as profile:
        extra = [f"--screenshot={shot}", "--window-size=1200,900"] if shot else ["--dump-dom"]
        proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                              capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class DevTools:
    """Headless Chromium driven over the DevTools protocol on a pipe
    (`--remote-debugging-pipe`: JSON messages ending in NUL, commands on the browser's fd 3,
    answers and events on its fd 4), so no websocket client is needed: open a page, evaluate
    JavaScript in it, take screenshots of it while it runs."""

    def __init__(self) -> None:
        assert CHROMIUM
        self.profile = tempfile.TemporaryDirectory()
        import fcntl

        def high(fd: int) -> int:  # clear of 3 and 4, which bash below redirects
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            return moved

        to_browser, self.commands = map(high, os.pipe())
        self.answers, from_browser = map(high, os.pipe())
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}', CHROMIUM, *FLAGS,
             f"--user-data-dir={self.profile.name}", "--remote-debugging-pipe",
             "--window-size=1200,1400", "about:blank"],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL,
            stderr=(Path(self.profile.name) / "stderr").open("wb"))
        os.close(to_browser)
        os.close(from_browser)
        self.buffer = b""
        self.next_id = 0
        self.session = ""

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = True,
             timeout: float = 60) -> dict[str, Any]:
        import select

        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.commands, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self.next_id:
                    assert "error" not in answer, (method, answer)
                    result: dict[str, Any] = answer["result"]
                    return result
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {method} from Chromium"
            if select.select([self.answers], [], [], left)[0]:
                chunk = os.read(self.answers, 1 << 20)
                assert chunk, "Chromium closed its DevTools pipe"
                self.buffer += chunk

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": url}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]

    def eval(self, expression: str) -> Any:
        """The value of `expression` in the page; while the page navigates (a reload, a
        redirect) it has no execution context for a moment, and the call is made again."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.call("Runtime.evaluate", {"expression": expression,
                                                      "returnByValue": True})["result"].get("value")
            except AssertionError as exc:
                if "execution context" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def wait(self, expression: str, timeout: float = 60) -> Any:
        """The first truthy value of `expression`, evaluated every 0.1 s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"never true in the page: {expression}")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(AssertionError, OSError):
            self.call("Browser.close", session=False, timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.commands)
        os.close(self.answers)
        self.profile.cleanup()
