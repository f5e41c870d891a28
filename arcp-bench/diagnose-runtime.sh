#!/usr/bin/env bash
# Where a call's cost goes against the published Rust runtime (arcp-runtime
# 2.0.0, `arcp-bench serve runtime`), for our client driven as the README
# shows and for the reference client, each in a process of its own, at
# several calls in flight: TCP segments each way (the runtime's socket, from
# `ss -ti`), syscalls and context switches of both processes (`perf stat`),
# per call, over the same 2 s inside each window. A fresh runtime per run
# (its in-memory event log grows with every envelope).
#
#   arcp-bench/diagnose-runtime.sh [BENCH_BINARY] [C ...]
#   CLIENTS=user arcp-bench/diagnose-runtime.sh ...   # one client only (default: user ref)
#
# Needs perf (perf_event_paranoid <= 2 is enough for a process of one's own)
# and ss (iproute2). Counts, not timings: safe to read on a busy machine,
# though batching (segments per call) shifts with load.
set -euo pipefail
bench=${1:-target/release/arcp-bench}
shift || true
cs=("${@:-1 4 16 64}")
read -r -a cs <<<"${cs[*]}"
events=raw_syscalls:sys_enter,context-switches,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_sendto,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_setsockopt
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

# ss's counters of the runtime's accepted socket on PORT, as "key value" lines.
seg_counts() {
    ss -tinH state established "( sport = :$1 )" | tr ' ' '\n' |
        grep -E '^(segs_out|segs_in|data_segs_out|data_segs_in):' | tr ':' ' '
}
# perf stat -x, output: value,unit,event,...  -> "event value"
perf_counts() { awk -F, '$1 ~ /^[0-9]+$/ {print $3, $1}' "$1"; }

printf '| client | c | calls/s | p50 us | client CPU us/call | runtime CPU us/call | runtime segs in/call (data) | runtime segs out/call (data) | runtime syscalls/call (recv, send, epoll, futex) | runtime ctx sw/call | client syscalls/call (setsockopt) | client ctx sw/call |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for c in "${cs[@]}"; do
    for client in ${CLIENTS:-user ref}; do
        "$bench" serve runtime --port 0 >"$tmp/server.out" 2>/dev/null &
        server=$!
        for _ in $(seq 100); do grep -q ARCP_URL "$tmp/server.out" && break; sleep 0.05; done
        url=$(sed -n 's/^ARCP_URL=//p' "$tmp/server.out" | head -1)
        port=$(sed -E 's#.*:([0-9]+)/?.*#\1#' <<<"$url")
        "$bench" drive --client "$client" --url "$url" --dialect legacy --in-flight "$c" \
            --warmup 0.5 --secs 3 --server-pid "$server" >"$tmp/drive.out" &
        driver=$!
        sleep 1.0
        seg_counts "$port" >"$tmp/seg0"
        timeout -s INT 2 perf stat -x, -e "$events" -p "$server" -o "$tmp/perf.server" &
        timeout -s INT 2 perf stat -x, -e "$events" -p "$driver" -o "$tmp/perf.client" &
        sleep 2.0
        seg_counts "$port" >"$tmp/seg1"
        wait "$driver" || true
        sleep 0.3
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        python3 - "$client" "$c" "$tmp" <<'PY'
import json, sys
client, c, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
line = [l for l in open(f"{tmp}/drive.out") if l.startswith("SAMPLE ")]
if not line:
    print(f"| {client} | {c} | no sample | | | | | | | | | |"); sys.exit()
s = json.loads(line[0][7:])
rate = s["calls"] / s["secs"]
lat = s["lat_ns"]; p50 = lat[len(lat) // 2] / 1000 if lat else 0
calls = rate * 2.0  # calls in the 2 s the counters cover
def kv(path):
    d = {}
    for l in open(path):
        p = l.split()
        if len(p) == 2: d[p[0]] = d.get(p[0], 0) + float(p[1])
    return d
def perf(path):
    d = {}
    for l in open(path):
        f = l.strip().split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit(): d[f[2]] = float(f[0])
    return d
s0, s1 = kv(f"{tmp}/seg0"), kv(f"{tmp}/seg1")
seg = {k: (s1.get(k, 0) - s0.get(k, 0)) / calls for k in s1}
ps, pc = perf(f"{tmp}/perf.server"), perf(f"{tmp}/perf.client")
g = lambda d, k: d.get(k, 0) / calls
sc = lambda k: "syscalls:sys_enter_" + k
print(f"| {client} | {c} | {rate:.0f} | {p50:.0f} | {s['client_cpu_ns']/1000/s['calls']:.1f} | "
      f"{s['server_cpu_ns']/1000/s['calls']:.1f} | "
      f"{seg.get('segs_in',0):.2f} ({seg.get('data_segs_in',0):.2f}) | {seg.get('segs_out',0):.2f} ({seg.get('data_segs_out',0):.2f}) | "
      f"{g(ps,'raw_syscalls:sys_enter'):.1f} ({g(ps,sc('recvfrom'))+g(ps,sc('read')):.2f}, {g(ps,sc('sendto'))+g(ps,sc('write'))+g(ps,sc('writev')):.2f}, {g(ps,sc('epoll_wait')):.2f}, {g(ps,sc('futex')):.2f}) | "
      f"{g(ps,'context-switches'):.2f} | {g(pc,'raw_syscalls:sys_enter'):.1f} ({g(pc,sc('setsockopt')):.2f}) | {g(pc,'context-switches'):.2f} |")
PY
    done
done
