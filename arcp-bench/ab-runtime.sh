#!/usr/bin/env bash
# Two arcp-bench binaries' README drivers against the published Rust runtime
# (arcp-runtime 2.0.0, `arcp-bench serve runtime`), alternated window by
# window, a fresh runtime per window (its in-memory event log grows with every
# envelope): calls/s, client CPU and p50 from the driver's own sample, and the
# driver process's syscalls, context switches and TCP_QUICKACK re-arms per
# call over 2 s inside the window (`perf stat`).
#
#   arcp-bench/ab-runtime.sh BASE_BINARY HEAD_BINARY C PAIRS
#
# Needs perf (perf_event_paranoid <= 2 is enough for a process of one's own).
# Prints one line per window, then the medians per binary.
set -euo pipefail
base=$1 head=$2 c=$3 pairs=$4
events=raw_syscalls:sys_enter,context-switches,syscalls:sys_enter_setsockopt
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

window() { # BINARY LABEL
    "$1" serve runtime --port 0 >"$tmp/server.out" 2>/dev/null &
    local server=$!
    for _ in $(seq 400); do grep -q ARCP_URL "$tmp/server.out" && break; sleep 0.05; done
    local url
    url=$(sed -n 's/^ARCP_URL=//p' "$tmp/server.out" | head -1)
    if [ -z "$url" ]; then
        echo "$2 no-runtime"
        kill "$server" 2>/dev/null || true
        return
    fi
    "$1" drive --url "$url" --dialect legacy --in-flight "$c" --warmup 0.5 --secs 3 \
        --server-pid "$server" >"$tmp/drive.out" &
    local driver=$!
    sleep 1.0
    timeout -s INT 2 perf stat -x, -e "$events" -p "$driver" -o "$tmp/perf.out" || true
    wait "$driver" || true
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    python3 - "$2" "$tmp" <<'PY' | tee -a "$tmp/lines"
import json, sys
label, tmp = sys.argv[1], sys.argv[2]
line = [l for l in open(f"{tmp}/drive.out") if l.startswith("SAMPLE ")]
if not line:
    print(label, "no-sample"); sys.exit()
s = json.loads(line[0][7:])
rate = s["calls"] / s["secs"]
lat = sorted(s["lat_ns"]); p50 = lat[len(lat) // 2] / 1000 if lat else 0
d = {}
for l in open(f"{tmp}/perf.out"):
    f = l.strip().split(",")
    if len(f) > 2 and f[0].replace(".", "").isdigit(): d[f[2]] = float(f[0])
calls = rate * 2.0  # calls in the 2 s the counters cover
g = lambda k: d.get(k, 0) / calls
print(label, f"{rate:.0f}", f"{s['client_cpu_ns'] / 1000 / s['calls']:.1f}", f"{p50:.0f}",
      f"{g('raw_syscalls:sys_enter'):.2f}", f"{g('context-switches'):.2f}",
      f"{g('syscalls:sys_enter_setsockopt'):.2f}")
PY
}

echo "binary calls/s cpu_us/call p50_us syscalls/call ctx_switches/call quickack/call"
for _ in $(seq "$pairs"); do
    window "$base" base
    window "$head" head
done
python3 - "$tmp/lines" <<'PY'
import statistics, sys
rows = {}
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) == 7: rows.setdefault(f[0], []).append([float(x) for x in f[1:]])
for label, rs in rows.items():
    med = [statistics.median(col) for col in zip(*rs)]
    print(f"median {label}: {med[0]:.0f} calls/s, {med[1]:.1f} us CPU/call, p50 {med[2]:.0f} us, "
          f"{med[3]:.2f} syscalls, {med[4]:.2f} ctx switches, {med[5]:.2f} quickacks per call ({len(rs)} windows)")
PY
