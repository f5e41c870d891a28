#!/usr/bin/env bash
# Two arcp-bench binaries' README drivers against one fast server (`arcp-bench
# serve fast`, a process of its own), alternated window by window, both
# dialects: calls/s, client CPU per call and p50 from each driver's own sample,
# and the machine's load average before each pair (another process's CPU shows
# there, not in the driver's CPU per call).
#
#   arcp-bench/ab-fast.sh BASE_BINARY HEAD_BINARY C PAIRS [SECS]
#
# Prints one line per window, then the medians per binary and dialect.
set -euo pipefail
base=$1 head=$2 c=$3 pairs=$4 secs=${5:-2}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

"$base" serve fast --port 0 >"$tmp/server.out" 2>/dev/null &
for _ in $(seq 400); do grep -q ARCP_URL "$tmp/server.out" && break; sleep 0.05; done
url=$(sed -n 's/^ARCP_URL=//p' "$tmp/server.out" | head -1)
[ -n "$url" ] || { echo "the fast server did not print its URL" >&2; exit 1; }

window() { # BINARY LABEL DIALECT
    "$1" drive --url "$url" --dialect "$3" --in-flight "$c" --warmup 0.3 --secs "$secs" \
        >"$tmp/drive.out" || true
    python3 - "$2" "$3" "$tmp/drive.out" <<'PY' | tee -a "$tmp/lines"
import json, sys
label, dialect, path = sys.argv[1:4]
line = [l for l in open(path) if l.startswith("SAMPLE ")]
if not line:
    print(label, dialect, "no-sample"); sys.exit()
s = json.loads(line[0][7:])
lat = s["lat_ns"]; p50 = lat[len(lat) // 2] / 1000 if lat else 0
print(label, dialect, f"{s['calls'] / s['secs']:.0f}",
      f"{s['client_cpu_ns'] / 1000 / max(s['calls'], 1):.2f}", f"{p50:.0f}")
PY
}

echo "binary dialect calls/s cpu_us/call p50_us"
for i in $(seq "$pairs"); do
    echo "# pair $i, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for dialect in legacy v1.1; do
        if [ $((i % 2)) -eq 1 ]; then
            window "$base" base "$dialect"; window "$head" head "$dialect"
        else
            window "$head" head "$dialect"; window "$base" base "$dialect"
        fi
    done
done
python3 - "$tmp/lines" <<'PY'
import statistics, sys
rows = {}
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) == 5: rows.setdefault((f[0], f[1]), []).append([float(x) for x in f[2:]])
for (label, dialect), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    med = [statistics.median(col) for col in zip(*rs)]
    print(f"median {label} {dialect}: {med[0]:.0f} calls/s, {med[1]:.2f} us CPU/call, "
          f"p50 {med[2]:.0f} us ({len(rs)} windows)")
PY
