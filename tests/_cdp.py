"""A small Chrome DevTools Protocol client: open a page in headless Chromium, measure it.

Why DevTools: a report's Content-Security-Policy forbids scripts, so the page cannot
measure itself; ``Runtime.evaluate`` comes from DevTools, not from the page, and CSP
does not apply to it.  ``--dump-dom`` gives no geometry.

How: Chromium starts headless with ``--remote-debugging-port=0`` and writes the port
it picked to ``DevToolsActivePort`` in its profile folder; one websocket (aiohttp,
already a dependency) talks to the browser, and each page is a flat session on it.
Console errors, uncaught exceptions and error log entries (a CSP violation, say) of
a page are collected in ``Page.errors``.

    async with Browser("/usr/bin/chromium", tmp_path / "profile") as browser:
        page = await browser.open(path.as_uri(), width=1280, height=900)
        title = await page.evaluate("document.title")
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)


class CDPError(RuntimeError):
    """Chromium did not start, a command failed, or a page did not load in time."""


class Page:
    """One tab: evaluate expressions in it; ``errors`` holds what its console reported."""

    def __init__(self, browser: Browser, target: str, session: str) -> None:
        self.browser, self.target, self.session = browser, target, session
        self.errors: list[str] = []
        self.loaded = asyncio.Event()

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.send(method, params, session=self.session)

    def event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Page.loadEventFired":
            self.loaded.set()
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(str(details.get("exception", {}).get("description") or details))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(" ".join(str(a.get("value", a)) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append(str(params["entry"].get("text")))

    async def goto(self, url: str, timeout: float = 60.0) -> None:
        self.loaded.clear()
        result = await self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CDPError(f"cannot open {url}: {result['errorText']}")
        try:
            await asyncio.wait_for(self.loaded.wait(), timeout)
        except TimeoutError as error:
            raise CDPError(f"{url} did not load in {timeout} s") from error

    async def evaluate(self, expression: str) -> Any:
        """The expression's value (JSON-able; a promise is awaited)."""
        reply = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in reply:
            raise CDPError(f"evaluation failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    async def close(self) -> None:
        await self.browser.send("Target.closeTarget", {"targetId": self.target})


class Browser:
    """A headless Chromium process and one DevTools connection to it (async context)."""

    def __init__(self, binary: str, profile: Path, start_timeout: float = 60.0) -> None:
        self.binary, self.profile, self.start_timeout = binary, profile, start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.http: aiohttp.ClientSession | None = None
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.reader: asyncio.Task[None] | None = None
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.pages: dict[str, Page] = {}
        self.ids = itertools.count(1)

    async def __aenter__(self) -> Browser:
        self.profile.mkdir(parents=True, exist_ok=True)
        port_file = self.profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [self.binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + self.start_timeout
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                await self.__aexit__(None, None, None)
                raise CDPError("Chromium did not open its DevTools port")
            await asyncio.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self.http = aiohttp.ClientSession()
        self.socket = await self.http.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)
        self.reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.socket is not None and not self.socket.closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.send("Browser.close"), 5)
            await self.socket.close()
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(BaseException):
                await self.reader
        if self.http is not None:
            await self.http.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    async def _read(self) -> None:
        assert self.socket is not None
        async for message in self.socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            if "id" in data:
                future = self.pending.pop(data["id"], None)
                if future is not None and not future.done():
                    if "error" in data:
                        future.set_exception(CDPError(str(data["error"])))
                    else:
                        future.set_result(data.get("result", {}))
            elif data.get("sessionId") in self.pages:
                self.pages[data["sessionId"]].event(data["method"], data.get("params", {}))
        for future in self.pending.values():
            if not future.done():
                future.set_exception(CDPError("the DevTools connection closed"))

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """One command; its result (raises ``CDPError`` on an error reply)."""
        if self.socket is None:
            raise CDPError("not connected")
        number = next(self.ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[number] = future
        await self.socket.send_str(json.dumps(message))
        return await asyncio.wait_for(future, timeout)

    async def open(self, url: str, width: int, height: int) -> Page:
        """A new tab with a ``width`` x ``height`` CSS-pixel viewport, ``url`` loaded."""
        target = (await self.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        attached = await self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, target, attached["sessionId"])
        self.pages[page.session] = page
        for domain in ("Page", "Runtime", "Log"):
            await page.send(f"{domain}.enable")
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        await page.goto(url)
        await page.evaluate("document.fonts.ready.then(() => true)")
        return page
