"""Run a :class:`~tirl.inference.server.ModelServer` under a real uvicorn in a thread of the test process.

For tests that inject a failure into the running server (``monkeypatch`` on its class) or count its work;
everything else is served by a ``tirl serve`` subprocess (``server_proc.py``). uvicorn leaves logging alone
(``log_config=None``), so the server's log records reach pytest's ``caplog``. On exit the server's tokenizer
and sampler threads are stopped too.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn

from tirl.inference.http_limits import uvicorn_limits
from tirl.inference.server import ModelServer


@contextlib.contextmanager
def serve_in_thread(model_server: ModelServer, startup_s: float = 60.0) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT/v1``); the server stops on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(model_server.app(), log_config=None, timeout_graceful_shutdown=5, **uvicorn_limits())
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the in-process server did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        model_server.tokenize.close()  # the server's own threads (a `tirl serve` process ends with them)
        asyncio.run(model_server.generator.close())
