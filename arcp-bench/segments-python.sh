#!/usr/bin/env bash
# TCP segments per call into and out of the published Python runtime 1.1.3
# (interop/python), for our client driven as the README shows and for the
# official Python client, each in a process of its own against a fresh
# runtime, read from the runtime's accepted socket (`ss -ti`) over 2 s inside
# each window. Segments in without data are the client's ACK packets.
#
#   arcp-bench/segments-python.sh [BENCH_BINARY] [C] [ROUNDS]
#
# Needs ss (iproute2) and the runtime installed by interop/setup.sh.
set -euo pipefail
bench=${1:-target/release/arcp-bench}
c=${2:-64}
rounds=${3:-2}
py=interop/python/.venv/bin/python
token=test-token
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

seg_counts() {
    ss -tinH state established "( sport = :$1 )" | tr ' ' '\n' |
        grep -E '^(segs_out|segs_in|data_segs_out|data_segs_in):' | tr ':' ' '
}

printf '| client | c | calls/s | runtime segs in/call | with data | ACK packets/call | runtime segs out/call (data) |\n'
printf '|---|---|---|---|---|---|---|\n'
for _ in $(seq "$rounds"); do
    for client in user python; do
        "$py" interop/python/server.py --port 0 >"$tmp/server.out" 2>/dev/null &
        server=$!
        for _ in $(seq 400); do grep -q ARCP_URL "$tmp/server.out" && break; sleep 0.05; done
        url=$(sed -n 's/^ARCP_URL=//p' "$tmp/server.out" | head -1)
        port=$(sed -E 's#.*:([0-9]+)/?.*#\1#' <<<"$url")
        if [ "$client" = user ]; then
            "$bench" drive --url "$url" --token "$token" --dialect v1.1 --in-flight "$c" \
                --warmup 0.5 --secs 3 >"$tmp/drive.out" &
        else
            "$py" arcp-bench/python/client_bench.py --url "$url" --token "$token" \
                --concurrency "$c" --warmup 0.5 --secs 3 >"$tmp/drive.out" &
        fi
        driver=$!
        sleep 1.0
        seg_counts "$port" >"$tmp/seg0"
        sleep 2.0
        seg_counts "$port" >"$tmp/seg1"
        wait "$driver" || true
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        python3 - "$client" "$c" "$tmp" <<'PY'
import json, sys
client, c, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
lines = [l for l in open(f"{tmp}/drive.out") if l.strip()]
if not lines:
    print(f"| {client} | {c} | no sample | | | | |"); sys.exit()
last = lines[-1]
s = json.loads(last[7:] if last.startswith("SAMPLE ") else last)
rate = s["calls"] / s["secs"]
calls = rate * 2.0  # calls in the 2 s the counters cover
kv = lambda p: {a: float(b) for a, b in (l.split() for l in open(p))}
s0, s1 = kv(f"{tmp}/seg0"), kv(f"{tmp}/seg1")
d = {k: (s1[k] - s0.get(k, 0)) / calls for k in s1}
print(f"| {client} | {c} | {rate:.0f} | {d.get('segs_in', 0):.2f} | {d.get('data_segs_in', 0):.2f} | "
      f"{d.get('segs_in', 0) - d.get('data_segs_in', 0):.2f} | {d.get('segs_out', 0):.2f} ({d.get('data_segs_out', 0):.2f}) |")
PY
    done
done
