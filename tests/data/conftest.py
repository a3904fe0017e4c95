"""The data tests' fixtures: a real HTTP server on 127.0.0.1 (:class:`data_cases.LoopbackServer`)."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator

import pytest
from data_cases import LoopbackServer


@pytest.fixture
def loopback(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackServer]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # a proxy must not intercept loopback requests
    state = LoopbackServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def handle(self) -> None:
            # A client that timed out on purpose hangs up before the delayed reply: expected, not an error.
            with contextlib.suppress(ConnectionError):
                super().handle()

        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            state.requests.append(path)
            if state.delay_s:
                time.sleep(state.delay_s)
            body = state.files.get(path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
