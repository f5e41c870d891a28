#!/usr/bin/env python3
"""ARCP interop test peer: the published Python reference runtime, on loopback.

Runs `arcp.runtime.ARCPRuntime` from PyPI `agentruntimecontrolprotocol==1.1.3`
(the v1.1 dialect: session.hello / job.submit / job.result ...) with three agents
that make duplicate executions observable from outside:

  echo     returns its input unchanged (emits one `log` event "echo started")
  counter  increments a process-global counter once per *execution*, then returns
           {"count": n, "input": input}. Input options (when input is an object):
             sleep   float seconds the job takes before finishing
             events  int N: the job reports progress 0..N+1 of N+1 steps
             fail    error code string to fail with (true = INTERNAL_ERROR)
  peek     read-only: returns {"count": n} without incrementing

Event shapes mirror the transcripts in shared/reference/captures/python-runtime-1.1.3*.jsonl:
counter emits `log` "counter incremented" {count}, then `progress` {current: 0, total: N+1,
units: "steps"}, then (spread over `sleep`) progress 1..N+1, then the result. A failing counter
emits the log and progress 0, waits `sleep`, then fails with the requested code.

Bearer tokens: test-token -> principal alice, other-token -> principal bob.

Once listening it prints exactly one line to stdout and flushes it:
    ARCP_URL=ws://127.0.0.1:PORT/arcp
then serves until killed (SIGTERM / SIGINT). Everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from importlib.metadata import version as dist_version
from typing import Any

from arcp._errors import ARCPError, error_class_for  # error code -> typed exception
from arcp._messages.session import RuntimeInfo
from arcp._transport.websocket import serve_websocket
from arcp.runtime import ARCPRuntime, JobContext, StaticBearerVerifier

PATH = "/arcp"
TOKENS = {"test-token": "alice", "other-token": "bob"}

# Process-global: counts executions of `counter` across all sessions and principals.
COUNT = 0


def _error_for(code: str, message: str) -> ARCPError:
    cls = error_class_for(code)
    if cls.code != code:
        # error_class_for collapses unknown codes to INTERNAL_ERROR; keep the caller's code
        # (runtimes add codes between releases, clients must carry unknown ones through).
        cls = type(f"Custom_{code}", (ARCPError,), {"code": code, "default_retryable": False})
    return cls(message)


async def echo(input_value: Any, ctx: JobContext) -> Any:
    await ctx.log("info", "echo started")
    return input_value


async def counter(input_value: Any, ctx: JobContext) -> Any:
    global COUNT
    opts: dict[str, Any] = input_value if isinstance(input_value, dict) else {}
    COUNT += 1
    n = COUNT
    await ctx.log("info", "counter incremented", {"count": n})
    sleep = float(opts.get("sleep") or 0)
    events = int(opts.get("events") or 0)
    total = events + 1
    await ctx.progress(0, total=total, units="steps")
    fail = opts.get("fail")
    if fail is not None and fail is not False:
        if sleep > 0:
            await asyncio.sleep(sleep)
        code = fail if isinstance(fail, str) else "INTERNAL_ERROR"
        raise _error_for(code, f"counter asked to fail with {code}")
    for i in range(1, total + 1):
        if sleep > 0:
            await asyncio.sleep(sleep / total)
        await ctx.progress(i, total=total, units="steps")
    return {"count": n, "input": input_value}


async def peek(_input_value: Any, _ctx: JobContext) -> Any:
    return {"count": COUNT}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument(
        "--heartbeat-sec",
        type=int,
        default=2,
        help="server ping interval (int seconds, 0 disables); the session is torn down "
        "after 2 intervals without inbound traffic. Default 2, as in the captures.",
    )
    ap.add_argument("--resume-window-sec", type=int, default=600, help="0 disables resume")
    ap.add_argument("--idempotency-ttl-sec", type=float, default=24 * 60 * 60)
    args = ap.parse_args()

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

    runtime = ARCPRuntime(
        runtime=RuntimeInfo(
            name="arcp-python-peer", version=dist_version("agentruntimecontrolprotocol")
        ),
        bearer=StaticBearerVerifier(TOKENS),
        heartbeat_interval_sec=args.heartbeat_sec or None,
        resume_window_sec=args.resume_window_sec,
        idempotency_ttl_sec=args.idempotency_ttl_sec,
    )
    runtime.register_agent("echo", echo)
    runtime.register_agent("counter", counter)
    runtime.register_agent("peek", peek)

    server = await serve_websocket(runtime.accept, host=args.host, port=args.port, path=PATH)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"ARCP_URL=ws://{args.host}:{port}{PATH}\n")
    sys.stdout.flush()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # Prompt exit for test harnesses: close frames (1001) to connected clients, wait at most
    # 1 s for them, then leave without waiting for unresponsive peers' close handshakes.
    server.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(server.wait_closed(), 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
