"""What a researcher sees first in TensorBoard, as a PNG: TensorBoard serves a run's event files and a
headless Chromium photographs its front page.

    python -m bench.tensorboard_screenshot RUN_DIR [--out docs/img/tensorboard.png] [--page timeseries]

``RUN_DIR`` is a run folder (its ``tb/`` is served) or a ``tb/`` folder itself. ``--page`` picks the tab
(``timeseries``: the default one, what opens first; ``custom_scalars``; ``hparams``; ``text``). The
script starts ``tensorboard --logdir RUN_DIR/tb --port P --host 127.0.0.1``, waits until it answers, opens
the page in ``chromium --headless --no-sandbox --window-size=1400,1000 --remote-debugging-port=D``, waits
``--settle`` seconds and takes the screenshot through the DevTools protocol, then stops both. (``chromium
--screenshot=OUT --virtual-time-budget=20000 URL`` is simpler but races TensorBoard's chart worker: its
charts came out empty or half drawn.) It needs ``chromium`` (``--chromium`` names another binary), this
environment's ``tensorboard`` and ``aiohttp`` (a dependency of Ray).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A port nothing listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_served(url: str, *, timeout_s: float, server: subprocess.Popen) -> None:
    """Poll ``url`` until TensorBoard answers (it reads the event files before it serves them)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"tensorboard exited with code {server.returncode} before it served {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"tensorboard did not answer at {url} within {timeout_s:.0f} s")


def screenshot(
    logdir: Path,
    out: Path,
    *,
    page: str = "timeseries",
    chromium: str = "chromium",
    size: tuple[int, int] = (1400, 1000),
    settle_s: float = 12.0,
) -> Path:
    """Serve ``logdir`` with TensorBoard, photograph ``page`` into ``out`` (PNG) and stop the server."""
    browser = shutil.which(chromium)
    if browser is None:
        raise FileNotFoundError(f"{chromium}: not found on PATH (pass --chromium with the browser's path)")
    port, debug = free_port(), free_port()
    out.parent.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port)),
            *("--host", "127.0.0.1", "--reload_interval", "0"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}/"
        wait_until_served(base + "data/runs", timeout_s=60, server=server)
        with tempfile.TemporaryDirectory() as profile:  # a fresh profile: no settings from an earlier look
            browsing = subprocess.Popen(
                [
                    *(browser, "--headless", "--no-sandbox", "--hide-scrollbars"),
                    *(f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}"),
                    *(f"--remote-debugging-port={debug}", "--remote-allow-origins=*"),
                    f"{base}#{page}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                png = asyncio.run(_capture(debug, settle_s=settle_s))
            finally:
                browsing.terminate()
                browsing.wait(timeout=30)
        out.write_bytes(png)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return out


async def _capture(debug_port: int, *, settle_s: float) -> bytes:
    """The page's pixels through the DevTools protocol, ``settle_s`` seconds (real time) after the browser
    opened it: TensorBoard draws its charts' lines in a worker, which ``chromium --screenshot`` does not
    wait for (its charts come out empty or half drawn)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + 30
        target = None
        while target is None:
            try:
                async with session.get(f"http://127.0.0.1:{debug_port}/json/list") as response:
                    pages = [t for t in await response.json() if t.get("type") == "page"]
                    target = pages[0]["webSocketDebuggerUrl"] if pages else None
            except aiohttp.ClientError:
                pass
            if target is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("chromium opened no page to photograph within 30 s")
                await asyncio.sleep(0.5)
        await asyncio.sleep(settle_s)
        async with session.ws_connect(target, max_msg_size=0) as ws:
            await ws.send_json({"id": 1, "method": "Page.captureScreenshot", "params": {"format": "png"}})
            async for message in ws:
                reply = json.loads(message.data)
                if reply.get("id") == 1:
                    if "error" in reply:
                        raise RuntimeError(f"chromium refused the screenshot: {reply['error']}")
                    return base64.b64decode(reply["result"]["data"])
    raise RuntimeError("chromium closed the connection before sending the screenshot")


def main(argv: list[str] | None = None) -> int:
    """Serve a run's event files with TensorBoard on 127.0.0.1 and screenshot a page in headless Chromium, so
    that what a user sees is checked as they see it."""
    parser = argparse.ArgumentParser(prog="python -m bench.tensorboard_screenshot", description=__doc__)
    parser.add_argument("run_dir", type=Path, help="a run folder (its tb/ is served) or a tb/ folder")
    parser.add_argument("--out", type=Path, default=Path("docs/img/tensorboard.png"))
    parser.add_argument("--page", default="timeseries", help="timeseries, custom_scalars, hparams, text")
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--settle", type=float, default=12.0, help="seconds to let the page draw")
    args = parser.parse_args(argv)
    logdir = args.run_dir / "tb" if (args.run_dir / "tb").is_dir() else args.run_dir
    path = screenshot(logdir, args.out, page=args.page, chromium=args.chromium, settle_s=args.settle)
    print(f"wrote {path} ({logdir}, #{args.page})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
