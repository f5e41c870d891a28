#!/usr/bin/env python3
"""Hand probe for the interop peers: speaks raw ARCP frames and prints every one.

    interop/python/.venv/bin/python interop/probe.py --url ws://127.0.0.1:PORT/arcp --dialect v1.1
    interop/python/.venv/bin/python interop/probe.py --url ws://127.0.0.1:PORT/arcp --dialect legacy

`--dialect v1.1` talks to interop/python/server.py (session.hello, job.submit, key in the
payload); `--dialect legacy` talks to interop/rust-peer (session.open, tool.invoke, key on
the envelope, `msg_` ids, `timestamp` required). Envelope ids are `msg_` + ULID for both.

The basic run: handshake, echo, peek, counter with an idempotency key, the same counter call
again (same key, same arguments, new envelope id), peek. It prints each frame (`>>` sent,
`<<` received, `..` connection events) and `CHECK ok|FAIL` lines that compare the shapes with
the captures in shared/reference/captures/. `--extended` adds: same key with other arguments,
a duplicate while the original is still running (from another session), an error frame,
an unknown message type, a malformed envelope id, and the heartbeat behaviour of an idle
session. Exit status 1 if any CHECK failed.

Only the `websockets` package is needed (pinned in interop/python/requirements.txt).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid() -> str:
    n = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


def msg_id() -> str:
    return f"msg_{ulid()}"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


FAILED: list[str] = []
T0 = time.monotonic()


def check(ok: bool, what: str) -> bool:
    print(f"CHECK {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        FAILED.append(what)
    return ok


def note(text: str) -> None:
    print(f"NOTE {text}", flush=True)


class Conn:
    """One WebSocket connection that prints every frame and (optionally) answers pings."""

    def __init__(self, label: str, ws: ClientConnection, *, answer_pings: bool) -> None:
        self.label = label
        self.ws = ws
        self.answer_pings = answer_pings
        self.session_id: str | None = None
        self.closed: str | None = None

    @classmethod
    async def open(cls, url: str, label: str, *, answer_pings: bool = True) -> Conn:
        ws = await connect(url, open_timeout=5, ping_interval=None, max_size=None)
        print(f"{time.monotonic() - T0:7.3f} {label} .. connected", flush=True)
        return cls(label, ws, answer_pings=answer_pings)

    def _log(self, arrow: str, text: str) -> None:
        print(f"{time.monotonic() - T0:7.3f} {self.label} {arrow} {text}", flush=True)

    async def send(self, env: dict[str, Any]) -> dict[str, Any]:
        await self.send_raw(json.dumps(env, separators=(",", ":")))
        return env

    async def send_raw(self, text: str) -> None:
        self._log(">>", text)
        await self.ws.send(text)

    async def recv(self, timeout: float) -> dict[str, Any] | None:
        """Next frame, or None on timeout or close (self.closed says which close)."""
        if self.closed is not None:
            return None
        try:
            raw = await asyncio.wait_for(self.ws.recv(), timeout)
        except TimeoutError:
            return None
        except ConnectionClosed as e:
            rcvd = e.rcvd
            self.closed = (
                f"close frame code={rcvd.code} reason={rcvd.reason!r}"
                if rcvd is not None
                else "dropped without a close frame"
            )
            self._log("..", f"closed: {self.closed}")
            return None
        self._log("<<", raw if isinstance(raw, str) else repr(raw))
        env = json.loads(raw)
        if env.get("type") == "session.ping" and self.answer_pings:
            # Pings are only answered while someone reads this connection: a client
            # that stops reading for 2 intervals loses the session (heartbeat_lost).
            await self.send(
                {
                    "arcp": "1.1",
                    "id": msg_id(),
                    "type": "session.pong",
                    "session_id": self.session_id,
                    "payload": {
                        "ping_nonce": env["payload"]["nonce"],
                        "received_at": now_rfc3339(),
                    },
                }
            )
        return env

    async def collect(self, until: Any, timeout: float) -> list[dict[str, Any]]:
        """Frames until `until(frame)` is true (included) or `timeout` seconds pass."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            env = await self.recv(left)
            if env is None:
                break
            out.append(env)
            if until(env):
                break
        return out

    async def close(self) -> None:
        await self.ws.close()


# --------------------------------------------------------------------------- v1.1 (Python)

V11_FEATURES = [
    "heartbeat", "ack", "list_jobs", "subscribe", "lease_expires_at",
    "cost.budget", "progress", "result_chunk", "agent_versions",
]  # fmt: skip


def v11(type_: str, payload: dict[str, Any], session_id: str | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {"arcp": "1.1", "id": msg_id(), "type": type_, "payload": payload}
    if session_id is not None:
        env["session_id"] = session_id
    return env


async def v11_open(url: str, label: str, token: str, *, answer_pings: bool = True) -> Conn:
    c = await Conn.open(url, label, answer_pings=answer_pings)
    await c.send(
        v11(
            "session.hello",
            {
                "client": {"name": "interop-probe", "version": "0.0.1"},
                "auth": {"scheme": "bearer", "token": token},
                "capabilities": {"encodings": ["json"], "features": V11_FEATURES},
            },
        )
    )
    frames = await c.collect(lambda e: e["type"] in ("session.welcome", "session.error"), 5)
    welcome = frames[-1] if frames else {}
    if welcome.get("type") == "session.welcome":
        c.session_id = welcome["payload"]["session_id"]
    return c


def is_v11_terminal(job_id: str | None):
    return lambda e: e["type"] in ("job.result", "job.error") and (
        job_id is None or e.get("job_id") == job_id
    )


async def v11_submit(
    c: Conn, payload: dict[str, Any], *, wait_terminal: float = 10
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    env = await c.send(v11("job.submit", payload, c.session_id))
    frames = await c.collect(
        lambda e: e["type"] in ("job.accepted", "session.error", "job.error"), 5
    )
    acc = next((f for f in frames if f["type"] == "job.accepted"), None)
    if acc is not None and wait_terminal > 0:
        job_id = acc["job_id"]
        if not any(is_v11_terminal(job_id)(f) for f in frames):
            frames += await c.collect(is_v11_terminal(job_id), wait_terminal)
    return env, frames


def v11_result(frames: list[dict[str, Any]]) -> Any:
    term = next((f for f in frames if f["type"] in ("job.result", "job.error")), None)
    return None if term is None else term["payload"].get("result", term["payload"])


async def v11_peek(c: Conn) -> int | None:
    _, frames = await v11_submit(c, {"agent": "peek", "input": None})
    res = v11_result(frames)
    return res.get("count") if isinstance(res, dict) else None


async def probe_v11(url: str, token: str, extended: bool) -> None:
    c = await v11_open(url, "A", token)
    check(c.session_id is not None, "v1.1: session.hello answered by session.welcome")

    data = {"hello": "world", "n": [1, 2, 3]}
    _, frames = await v11_submit(c, {"agent": "echo", "input": data})
    check(v11_result(frames) == data, "v1.1: echo returns its input in job.result.result")

    before = await v11_peek(c)
    key = f"probe-{ulid()}"
    payload = {"agent": "counter", "input": {"tag": "a", "events": 2}, "idempotency_key": key}
    env1, frames1 = await v11_submit(c, payload)
    acc1 = next((f for f in frames1 if f["type"] == "job.accepted"), {})
    res1 = v11_result(frames1)
    check(
        acc1.get("payload", {}).get("request_id") == env1["id"],
        "v1.1: job.accepted.payload.request_id echoes the job.submit envelope id",
    )
    check(
        isinstance(res1, dict) and res1.get("count") == (before or 0) + 1,
        "v1.1: counter ran once and reported count+1",
    )
    kinds = [f["payload"]["kind"] for f in frames1 if f["type"] == "job.event"]
    check(
        kinds == ["log", "progress", "progress", "progress", "progress"],
        f"v1.1: counter events are log + progress 0..3 as in the capture (got {kinds})",
    )

    env2, frames2 = await v11_submit(c, payload, wait_terminal=0)
    frames2 += await c.collect(lambda e: False, 1.0)
    acc2 = next((f for f in frames2 if f["type"] == "job.accepted"), {})
    term2 = [f for f in frames2 if f["type"] in ("job.result", "job.error")]
    check(
        acc2.get("job_id") == acc1.get("job_id") and acc2.get("id") == acc1.get("id"),
        "v1.1: same key + same payload after completion -> job.accepted replayed "
        "(original job_id and original envelope id)",
    )
    check(
        acc2.get("payload", {}).get("request_id") == env2["id"],
        "v1.1: replayed job.accepted carries the new request_id",
    )
    check(
        len(term2) == 1 and term2[0].get("payload", {}).get("result") == res1,
        "v1.1: ... followed by the stored job.result (same result)",
    )
    check(
        not any(f["type"] == "job.event" for f in frames2),
        "v1.1: replay carries no job.event (nothing re-executed)",
    )
    check(await v11_peek(c) == (before or 0) + 1, "v1.1: peek shows the counter ran once")

    if extended:
        await v11_extended(url, token, c, payload)
    await c.send(v11("session.bye", {"reason": "probe.done"}, c.session_id))
    await c.collect(lambda e: False, 0.5)
    await c.close()
    if extended:
        # Last, on its own: while it runs nobody reads (and pongs) connection A.
        await v11_heartbeat(url, token)


async def v11_extended(url: str, token: str, c: Conn, payload: dict[str, Any]) -> None:
    # Same key, different intent: input changed / an optional field added.
    for what, other in (
        ("other input", {**payload, "input": {"tag": "DIFFERENT", "events": 2}}),
        ("lease_request: {} added", {**payload, "lease_request": {}}),
    ):
        _, frames = await v11_submit(c, other, wait_terminal=0)
        err = next((f for f in frames if f["type"] == "session.error"), {})
        check(
            err.get("payload", {}).get("code") == "DUPLICATE_KEY"
            and "job_id" not in err
            and "request_id" not in err.get("payload", {}),
            f"v1.1: same key + {what} -> session.error DUPLICATE_KEY without request id/job_id",
        )

    # Duplicate while the original is still running, from a second session.
    key = f"probe-run-{ulid()}"
    run = {"agent": "counter", "input": {"sleep": 1.5}, "idempotency_key": key}
    b = await v11_open(url, "B", token)
    _, fa = await v11_submit(c, run, wait_terminal=0)
    _, fb = await v11_submit(b, run, wait_terminal=0)
    job_a = next((f["job_id"] for f in fa if f["type"] == "job.accepted"), None)
    fa += await c.collect(is_v11_terminal(job_a), 5)
    fb += await b.collect(lambda e: False, 1.0)
    check(
        any(f["type"] == "job.accepted" and f["job_id"] == job_a for f in fb)
        and not any(f["type"] in ("job.result", "job.error", "job.event") for f in fb),
        "v1.1: same key while running (other session) -> job.accepted only; no event and "
        "no terminal reach that session, even after the job ended",
    )
    _, fb2 = await v11_submit(b, run, wait_terminal=0)
    fb2 += await b.collect(lambda e: False, 0.5)
    check(
        [f["type"] for f in fb2] == ["job.accepted", "job.result"],
        "v1.1: re-send after completion -> job.accepted + job.result",
    )
    await b.close()

    # A terminal tool error, then its replay.
    key = f"probe-fail-{ulid()}"
    failing = {"agent": "counter", "input": {"fail": "PERMISSION_DENIED"}, "idempotency_key": key}
    _, f1 = await v11_submit(c, failing)
    e1 = next((f for f in f1 if f["type"] == "job.error"), {})
    check(
        e1.get("payload", {}).get("code") == "PERMISSION_DENIED"
        and e1["payload"].get("retryable") is False,
        "v1.1: failing job -> job.error with job_id, code, retryable",
    )
    _, f2 = await v11_submit(c, failing, wait_terminal=0)
    f2 += await c.collect(lambda e: False, 0.5)
    check(
        [f["type"] for f in f2] == ["job.accepted", "job.error"]
        and f2[-1].get("id") == e1.get("id"),
        "v1.1: same key after a failed job -> job.accepted + the stored job.error",
    )

    # Unknown agent, unknown type, malformed id: session.error, connection stays open.
    _, f = await v11_submit(c, {"agent": "nope", "input": {}}, wait_terminal=0)
    check(
        any(e["type"] == "session.error" and e["payload"]["code"] == "AGENT_NOT_AVAILABLE"
            for e in f),
        "v1.1: unknown agent -> session.error AGENT_NOT_AVAILABLE (no request id)",
    )  # fmt: skip
    await c.send(v11("arcpx.vendor.thing.v1", {"x": 1}, c.session_id))
    f = await c.collect(lambda e: e["type"] == "session.error", 2)
    check(
        bool(f) and f[-1]["payload"]["code"] == "INVALID_REQUEST",
        "v1.1: unknown message type -> session.error INVALID_REQUEST",
    )
    bad = v11("job.submit", {"agent": "echo", "input": 1}, c.session_id)
    bad["id"] = "not-a-ulid"
    await c.send(bad)
    f = await c.collect(lambda e: e["type"] == "session.error", 2)
    check(
        bool(f) and f[-1]["payload"]["code"] == "INVALID_REQUEST",
        "v1.1: malformed envelope id -> session.error INVALID_REQUEST",
    )
    _, f = await v11_submit(c, {"agent": "echo", "input": "still-alive"})
    check(v11_result(f) == "still-alive", "v1.1: the connection survives all of the above")



async def v11_heartbeat(url: str, token: str) -> None:
    """A session that never answers the runtime's session.ping."""
    h = await v11_open(url, "H", token, answer_pings=False)
    started = time.monotonic()
    pings = 0
    while h.closed is None and time.monotonic() - started < 15:
        env = await h.recv(15 - (time.monotonic() - started))
        if env is not None and env["type"] == "session.ping":
            pings += 1
    took = time.monotonic() - started
    check(h.closed is not None, f"v1.1: unanswered pings -> runtime closes the session ({pings} "
          f"ping(s), closed after {took:.1f}s: {h.closed})")  # fmt: skip


# --------------------------------------------------------------------------- legacy (Rust)


def legacy(type_: str, payload: dict[str, Any], session_id: str | None = None, **top: Any):
    env: dict[str, Any] = {
        "arcp": "1.1",
        "id": msg_id(),
        "timestamp": now_rfc3339(),
        "type": type_,
        "payload": payload,
    }
    if session_id is not None:
        env["session_id"] = session_id
    env.update(top)
    return env


async def legacy_open(url: str, label: str, token: str) -> Conn:
    c = await Conn.open(url, label)
    await c.send(
        legacy(
            "session.open",
            {
                "auth": {"scheme": "bearer", "token": token},
                "client": {"kind": "interop-probe", "version": "0.0.1"},
                "capabilities": {"streaming": True, "durable_jobs": True},
            },
        )
    )
    frames = await c.collect(lambda e: e["type"] in ("session.accepted", "session.rejected"), 5)
    acc = frames[-1] if frames else {}
    if acc.get("type") == "session.accepted":
        c.session_id = acc["payload"]["session_id"]
    return c


LEGACY_TERMINAL = ("job.completed", "job.failed", "job.cancelled")


async def legacy_invoke(
    c: Conn, tool: str, arguments: Any, *, key: str | None = None, wait_terminal: float = 10
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    top = {"idempotency_key": key} if key is not None else {}
    env = await c.send(legacy("tool.invoke", {"tool": tool, "arguments": arguments},
                              c.session_id, **top))  # fmt: skip
    mine = lambda e: e.get("correlation_id") == env["id"]  # noqa: E731
    frames = await c.collect(
        lambda e: mine(e) and e["type"] in ("job.accepted", "job.failed"), 5
    )
    if wait_terminal > 0 and not any(f["type"] == "job.failed" for f in frames):
        frames += await c.collect(lambda e: mine(e) and e["type"] in LEGACY_TERMINAL,
                                  wait_terminal)  # fmt: skip
    return env, frames


def legacy_value(frames: list[dict[str, Any]]) -> Any:
    term = next((f for f in frames if f["type"] in LEGACY_TERMINAL), None)
    if term is None:
        return None
    return term["payload"].get("value", term["payload"])


async def legacy_peek(c: Conn) -> int | None:
    _, frames = await legacy_invoke(c, "peek", {})
    v = legacy_value(frames)
    return v.get("count") if isinstance(v, dict) else None


async def probe_legacy(url: str, token: str, extended: bool) -> None:
    c = await legacy_open(url, "A", token)
    check(c.session_id is not None, "legacy: session.open answered by session.accepted")

    args = {"msg": "hi", "n": 1}
    _, frames = await legacy_invoke(c, "echo", args)
    check(legacy_value(frames) == args, "legacy: echo returns its arguments in job.completed.value")
    check(
        [f["type"] for f in frames] == ["job.accepted", "job.started", "job.completed"],
        "legacy: job.accepted, job.started, job.completed",
    )

    before = await legacy_peek(c)
    key = f"probe-{ulid()}"
    cargs = {"sleep_ms": 300, "ticks": 2}
    env1, frames1 = await legacy_invoke(c, "counter", cargs, key=key)
    acc1 = next((f for f in frames1 if f["type"] == "job.accepted"), {})
    v1 = legacy_value(frames1)
    check(
        acc1.get("correlation_id") == env1["id"],
        "legacy: job.accepted.correlation_id echoes the tool.invoke envelope id",
    )
    check(
        isinstance(v1, dict) and v1.get("count") == (before or 0) + 1,
        "legacy: counter ran once and reported count+1",
    )
    check(
        sum(1 for f in frames1 if f["type"] == "metric") == 2,
        "legacy: 2 ticks -> 2 `metric` frames (cost.tick)",
    )

    env2, frames2 = await legacy_invoke(c, "counter", cargs, key=key, wait_terminal=0)
    frames2 += await c.collect(lambda e: False, 1.5)
    acc2 = next((f for f in frames2 if f["type"] == "job.accepted"), {})
    check(
        acc2.get("job_id") == acc1.get("job_id")
        and acc2.get("correlation_id") == env2["id"]
        and acc2.get("idempotency_key") == key,
        "legacy: same key + same arguments -> job.accepted with the original job_id, "
        "new correlation_id, key echoed on the envelope",
    )
    check(
        [f["type"] for f in frames2] == ["job.accepted"],
        "legacy: ... and nothing else (no terminal replay), even 1.5 s later",
    )
    check(await legacy_peek(c) == (before or 0) + 1, "legacy: peek shows the counter ran once")

    if extended:
        await legacy_extended(url, token, c, key, cargs)
    await c.close()


async def legacy_extended(url: str, token: str, c: Conn, key: str, cargs: dict) -> None:
    for what, tool, other in (
        ("other arguments", "counter", {**cargs, "ticks": 3}),
        ("1 vs 1.0", "counter", {**cargs, "ticks": 2.0}),
        ("other tool", "echo", cargs),
    ):
        _, frames = await legacy_invoke(c, tool, other, key=key, wait_terminal=0)
        f = frames[-1] if frames else {}
        check(
            f.get("type") == "job.failed"
            and f["payload"].get("code") == "FAILED_PRECONDITION"
            and "job_id" not in f
            and f.get("correlation_id") is not None,
            f"legacy: same key + {what} -> job.failed FAILED_PRECONDITION, no job_id, "
            "correlation_id set",
        )

    # Key inside the payload instead of on the envelope: ignored.
    before = await legacy_peek(c)
    pkey = f"probe-payload-{ulid()}"
    for _ in range(2):
        env = await c.send(legacy("tool.invoke", {"tool": "counter", "arguments": {"x": 1},
                                                  "idempotency_key": pkey}, c.session_id))  # fmt: skip
        await c.collect(lambda e, i=env["id"]: e.get("correlation_id") == i
                        and e["type"] in LEGACY_TERMINAL, 5)  # fmt: skip
    check(
        await legacy_peek(c) == (before or 0) + 2,
        "legacy: idempotency_key inside the payload is ignored (executed twice)",
    )

    # Duplicate while running, from another session; nothing more arrives there.
    rkey = f"probe-run-{ulid()}"
    run = {"sleep_ms": 1200, "ticks": 2}
    b = await legacy_open(url, "B", token)
    _, fa = await legacy_invoke(c, "counter", run, key=rkey, wait_terminal=0)
    _, fb = await legacy_invoke(b, "counter", run, key=rkey, wait_terminal=0)
    fa += await c.collect(lambda e: e["type"] in LEGACY_TERMINAL, 5)
    fb += await b.collect(lambda e: False, 1.0)
    job_a = next((f["job_id"] for f in fa if f["type"] == "job.accepted"), None)
    check(
        [f["type"] for f in fb] == ["job.accepted"] and fb[0]["job_id"] == job_a,
        "legacy: same key while running (other session) -> job.accepted (original job_id) "
        "only; events and terminal go to the submitting connection alone",
    )
    await b.close()

    # Terminal error, then same key again.
    fkey = f"probe-fail-{ulid()}"
    _, f1 = await legacy_invoke(c, "fail", {"message": "nope"}, key=fkey)
    check(
        f1[-1]["type"] == "job.failed" and f1[-1]["payload"]["code"] == "PERMISSION_DENIED"
        and f1[-1]["payload"]["message"] == "permission denied: nope" and "job_id" in f1[-1],
        "legacy: fail tool -> job.failed PERMISSION_DENIED 'permission denied: nope' with job_id",
    )  # fmt: skip
    _, f2 = await legacy_invoke(c, "fail", {"message": "try later", "retryable": True})
    check(
        f2[-1]["payload"]["code"] == "UNAVAILABLE" and f2[-1]["payload"]["retryable"] is True,
        "legacy: fail tool retryable -> job.failed UNAVAILABLE retryable=true",
    )
    _, f3 = await legacy_invoke(c, "fail", {"message": "nope"}, key=fkey, wait_terminal=0)
    f3 += await c.collect(lambda e: False, 1.0)
    check(
        [f["type"] for f in f3] == ["job.accepted"],
        "legacy: same key after a failed job -> job.accepted only (the error is not replayed)",
    )

    # Ping / heartbeat: the runtime answers session.ping, and never pings by itself.
    await c.send(legacy("session.ping", {"nonce": "n1", "sent_at": now_rfc3339()}, c.session_id))
    f = await c.collect(lambda e: e["type"] == "session.pong", 2)
    check(bool(f) and f[-1]["payload"].get("ping_nonce") == "n1",
          "legacy: session.ping -> session.pong with ping_nonce and correlation_id")  # fmt: skip
    idle = await c.collect(lambda e: True, 5)
    check(not idle and c.closed is None,
          "legacy: 5 s idle: no runtime ping, connection stays open")  # fmt: skip

    # Frames the runtime cannot parse: the connection is dropped without any error frame.
    cases = [
        ("unknown message type", legacy("arcpx.vendor.thing.v1", {"x": 1}, c.session_id)),
        ("id without msg_ prefix", {**legacy("session.ping", {"nonce": "n", "sent_at":
                                    now_rfc3339()}, c.session_id), "id": ulid()}),
        ("no timestamp", {k: v for k, v in legacy("session.ping", {"nonce": "n", "sent_at":
                          now_rfc3339()}, c.session_id).items() if k != "timestamp"}),
    ]  # fmt: skip
    await c.close()
    for what, env in cases:
        d = await legacy_open(url, "D", token)
        await d.send(env)
        f = await d.collect(lambda e: True, 2)
        check(
            not f and d.closed == "dropped without a close frame",
            f"legacy: {what} -> connection dropped, no error frame ({d.closed or 'still open'})",
        )
        await d.close()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--dialect", choices=["v1.1", "legacy"], required=True)
    ap.add_argument("--token", help="default: test-token (v1.1), secret-token (legacy)")
    ap.add_argument("--extended", action="store_true")
    args = ap.parse_args()
    if args.dialect == "v1.1":
        await probe_v11(args.url, args.token or "test-token", args.extended)
    else:
        await probe_legacy(args.url, args.token or "secret-token", args.extended)
    print(f"probe: {len(FAILED)} check(s) failed" if FAILED else "probe: all checks ok")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
