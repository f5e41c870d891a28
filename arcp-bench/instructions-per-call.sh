#!/usr/bin/env bash
# Instructions per call of one scenario, counted by valgrind's callgrind:
# deterministic, so it tells apart changes smaller than the noise of a
# shared machine's wall-clock figures (BENCHMARKS.md, "Instructions per call").
#
#   arcp-bench/instructions-per-call.sh BINARY MARKER ARGS...
#
# Runs `BINARY ARGS... --secs 1` and `BINARY ARGS... --secs 4` under
# callgrind (the server processes run natively) and prints
#   (instructions of the 4 s run - those of the 1 s run) / (calls - calls)
# where calls are the calls of MARKER, a function run once per call: the
# start-up, connect and warm-up costs cancel out. Examples:
#
#   M=reqwest::async_impl::client::Client::execute_request
#   arcp-bench/instructions-per-call.sh target/release/arcp-bench $M \
#       --sections http --rounds 1 --warmup 0.3 --only ours/http/v1.1/1
#   M=arcp_sdk::invocation::InvokeBuilder::send
#   arcp-bench/instructions-per-call.sh target/release/arcp-bench $M \
#       drive --url ws://127.0.0.1:PORT/arcp --dialect v1.1 --warmup 0.3
#
# (for `drive`, start a server first: `arcp-bench serve fast`).
set -euo pipefail
bin=$1
marker=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for secs in 1 4; do
	valgrind --tool=callgrind --callgrind-out-file="$dir/$secs.out" \
		"$bin" "$@" --secs "$secs" >/dev/null 2>&1
done
count() {
	# The totals line, and the calls recorded against MARKER as a callee
	# (names are compressed: `(id) name` the first time, `(id)` after).
	awk -v marker="$marker" '
		function entry(line, prefix,    s, id) {
			s = line
			sub("^" prefix "=\\(", "", s)
			id = s
			sub(/\).*$/, "", id)
			if (index(s, ") ") > 0) {
				sub(/^[0-9]+\) /, "", s)
				name[id] = s
			}
			return name[id]
		}
		/^(summary|totals):/ { total = $2 }
		/^fn=/ { entry($0, "fn") }
		/^cfn=/ { callee = entry($0, "cfn") }
		/^calls=/ {
			s = $0
			sub(/^calls=/, "", s)
			split(s, c, " ")
			if (callee == marker) calls += c[1]
		}
		END { print total, calls + 0 }
	' "$1"
}
read -r i1 c1 < <(count "$dir/1.out")
read -r i4 c4 < <(count "$dir/4.out")
if [ "$c4" -le "$c1" ]; then
	echo "no more calls of $marker in the longer run ($c1, $c4)" >&2
	exit 1
fi
echo "$(( (i4 - i1) / (c4 - c1) )) instructions per call ($((c4 - c1)) calls between the runs)"
