"""``tirl serve``: serve a checkpoint with an OpenAI-compatible HTTP API (see :mod:`tirl.inference.server`).

Without ``--model`` the built-in warm-started tiny model is served. ``--port 0``
picks a free port. The first line on stdout is
``tirl serve: listening on http://HOST:PORT/v1 (model NAME)`` once the socket
is bound, so scripts can wait for it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from tirl.cli import port
from tirl.config_ranges import check_flag
from tirl.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``tirl serve``."""
    parser.add_argument("--model", default=None, help="local Hugging Face model directory (default: built-in model)")
    parser.add_argument(
        "--served-model-name", default=None, help="the name clients pass as 'model' (default: the directory name)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8000, help="port to bind; 0 = a free port (default 8000)")
    parser.add_argument(
        "--api-key", default=None, help="require 'Authorization: Bearer KEY' (default: $TIRL_API_KEY, else no key)"
    )
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--max-batch", type=int, default=64, help="most requests sampled in one batch")
    parser.add_argument(
        "--batch-window-ms",
        type=float,
        default=5.0,
        help="how long to wait for concurrent requests before a batch starts",
    )
    parser.add_argument(
        "--arrival-gap-ms",
        type=float,
        default=10.0,
        help="an idle sampler waits for a burst of requests until none arrived for this long",
    )
    parser.add_argument(
        "--max-arrival-wait-ms",
        type=float,
        default=250.0,
        help="... but never longer than this (0 = no waiting for bursts)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for requests without a seed")
    parser.add_argument(
        "--max-body-mb", type=float, default=8.0, help="refuse request bodies larger than this with 413 (default 8)"
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds a request (head and body) may take to arrive; slower ones get 408 and are closed (default 30)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug", "trace"),
        help="uvicorn log level (default warning)",
    )


def _bind(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    from tirl.errors import SetupError

    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, ValueError, TypeError, OverflowError) as exc:  # refused, unknown host, a NUL in --host
        sock.close()
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SetupError(f"cannot bind {host}:{port} ({why}) — check --host, pick another --port, or 0") from None
    return sock


def run(args: argparse.Namespace) -> int:
    """Load the model and serve until interrupted (every argument is checked before the model loads)."""
    if args.max_batch is not None and args.max_batch < 1:
        raise ConfigError(f"--max-batch {args.max_batch} is invalid: use at least 1")
    check_flag("--threads", "trainer.threads", args.threads)
    if not 0 < args.max_body_mb <= 4096:
        raise ConfigError(f"--max-body-mb {args.max_body_mb} is invalid: use a size in (0, 4096] MB")
    if not 0 < args.request_timeout <= 3600:  # NaN fails too
        raise ConfigError(f"--request-timeout {args.request_timeout} is invalid: use seconds in (0, 3600]")
    if not 0 <= args.seed < 2**63:
        raise ConfigError(f"--seed {args.seed} is invalid: use 0 <= seed < 2**63")
    for flag in ("batch_window_ms", "arrival_gap_ms", "max_arrival_wait_ms"):
        value = getattr(args, flag)
        if not 0 <= value <= 60_000:  # NaN fails too
            name = "--" + flag.replace("_", "-")
            raise ConfigError(f"{name} {value} is invalid: use milliseconds from 0 to 60000")
    api_key = args.api_key or os.environ.get("TIRL_API_KEY")
    if api_key and not (api_key.isascii() and api_key.isprintable() and api_key == api_key.strip()):
        # an HTTP header carries ASCII, and the server strips the token: such a key could never be sent
        raise ConfigError(
            "--api-key (or $TIRL_API_KEY) holds a non-ASCII or control character or surrounding spaces, which no "
            "client can send in an Authorization header: use printable ASCII"
        )
    from tirl.models.loading import check_device

    check_device(args.device, "--device")
    import uvicorn

    from tirl.inference.http_limits import uvicorn_limits
    from tirl.inference.server import ModelServer
    from tirl.models.loading import load_policy

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = _bind(family, args.host, args.port)  # a bad --host or a taken --port fails before the model loads
    try:
        policy = load_policy(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
    except BaseException:
        sock.close()
        raise
    name = args.served_model_name or policy.path.name
    server = ModelServer(
        policy,
        model_name=name,
        api_key=api_key,
        max_batch=args.max_batch,
        batch_window_s=max(0.0, args.batch_window_ms) / 1000.0,
        arrival_gap_s=max(0.0, args.arrival_gap_ms) / 1000.0,
        max_arrival_wait_s=max(0.0, args.max_arrival_wait_ms) / 1000.0,
        seed=args.seed,
        max_body_bytes=int(args.max_body_mb * 2**20),
    )
    sock.listen(2048)
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    print(f"tirl serve: listening on http://{host}:{port}/v1 (model {name})", flush=True)
    config = uvicorn.Config(
        server.app(),
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
        **uvicorn_limits(args.request_timeout),
    )  # uvicorn_limits: a head over 32 KB or a line over 8 KB is 431 unread; a request slower than the timeout 408
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    print("tirl serve: stopped", file=sys.stderr)
    return 0
