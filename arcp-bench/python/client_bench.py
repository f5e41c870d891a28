#!/usr/bin/env python3
"""Closed-loop load from the published Python client (agentruntimecontrolprotocol 1.1.3).

Used by `arcp-bench --sections runtime` and `--sections python`: one
`ARCPClient` session over `WebSocketTransport.connect`, `concurrency` tasks each
submitting the `echo` agent and awaiting `handle.done` in a loop, as the
client's README shows. After `warmup` seconds it measures for `secs` seconds
and prints one JSON line:

    {"calls": N, "errors": E, "secs": S, "p50_us": X, "p99_us": Y, "cpu_secs": C,
     "lat_ns": [...], "client_cpu_ns": C_NS, "server_cpu_ns": S_NS}

`cpu_secs` (and `client_cpu_ns`) is this process's user + system CPU over the
window (getrusage); `server_cpu_ns` the run time of `--server-pid`'s threads
over the same window (schedstat), 0 without it; `lat_ns` the window's
latencies, sorted, at most 20,001 evenly spaced ranks (the largest kept).
The client sends an idempotency key per call, as ours does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
import uuid

from arcp._messages.session import ClientInfo
from arcp._transport.websocket import WebSocketTransport
from arcp.client import ARCPClient


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_ns(pid: int | None) -> int:
    """Run time of every thread of `pid` (0 without one), as arcp-bench reads it."""
    if pid is None:
        return 0
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


MAX_LATENCIES = 20_001


def kept_latencies(sorted_ns: list[int]) -> list[int]:
    step = max(1, -(-len(sorted_ns) // MAX_LATENCIES))
    kept = sorted_ns[::step]
    if step > 1 and kept:
        kept[-1] = sorted_ns[-1]
    return kept


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=0.3)
    parser.add_argument("--secs", type=float, default=2.0)
    parser.add_argument("--server-pid", type=int, default=None)
    args = parser.parse_args()

    transport = await WebSocketTransport.connect(args.url)
    client = ARCPClient(client=ClientInfo(name="arcp-bench-python", version="1"), token=args.token)
    await client.connect(transport)

    state = {"measuring": False, "stop": False, "calls": 0, "errors": 0}
    latencies: list[float] = []

    async def worker() -> None:
        while not state["stop"]:
            t0 = time.perf_counter()
            try:
                handle = await client.submit(
                    agent="echo", input={"order": 4812}, idempotency_key=str(uuid.uuid4())
                )
                await handle.done
                ok = True
            except Exception:  # noqa: BLE001 - counted, the loop goes on
                ok = False
            if state["measuring"]:
                if ok:
                    state["calls"] += 1
                    latencies.append(time.perf_counter() - t0)
                else:
                    state["errors"] += 1

    tasks = [asyncio.create_task(worker()) for _ in range(args.concurrency)]
    await asyncio.sleep(args.warmup)
    state["measuring"] = True
    cpu0, srv0, t0 = cpu_now(), process_cpu_ns(args.server_pid), time.perf_counter()
    await asyncio.sleep(args.secs)
    state["measuring"] = False
    cpu1, srv1, t1 = cpu_now(), process_cpu_ns(args.server_pid), time.perf_counter()
    state["stop"] = True
    await asyncio.wait(tasks, timeout=5)
    latencies.sort()

    def pct(p: float) -> float:
        if not latencies:
            return 0.0
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e6

    print(
        json.dumps(
            {
                "calls": state["calls"],
                "errors": state["errors"],
                "secs": t1 - t0,
                "p50_us": pct(0.50),
                "p99_us": pct(0.99),
                "cpu_secs": cpu1 - cpu0,
                "lat_ns": kept_latencies([int(x * 1e9) for x in latencies]),
                "client_cpu_ns": int((cpu1 - cpu0) * 1e9),
                "server_cpu_ns": max(0, srv1 - srv0),
            }
        ),
        flush=True,
    )
    try:
        await asyncio.wait_for(client.close(), timeout=2)
    except Exception:  # noqa: BLE001 - best effort
        pass
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
