#!/usr/bin/env bash
# Installs the two real ARCP runtimes that the interop tests start on loopback:
#
#   interop/python/.venv                                  Python reference runtime 1.1.3 (PyPI)
#   interop/rust-peer/target/release/arcp-rust-peer       Rust reference runtime 2.0.0 (crates.io)
#
# Idempotent: re-running reuses the venv and cargo's build cache. Fails (non-zero exit, message
# on stderr) if either peer cannot be installed or does not start. Needs Python >= 3.11 with the
# venv module, and cargo; reaches PyPI and crates.io only.
#
# Environment: PYTHON (default python3), ARCP_SETUP_SKIP_SMOKE=1 to skip the start-up check.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/python/.venv"
REQS="$HERE/python/requirements.txt"
PEER_DIR="$HERE/rust-peer"
# Always build into the peer's own target dir (a CARGO_TARGET_DIR set for the SDK workspace
# must not move the binary away from where the tests look for it).
export CARGO_TARGET_DIR="$PEER_DIR/target"
RUST_PEER="$CARGO_TARGET_DIR/release/arcp-rust-peer"
PYTHON="${PYTHON:-python3}"
START=$SECONDS

say() { printf '[interop/setup] %s\n' "$*"; }
die() {
	printf '\n[interop/setup] ERROR: %s\n\n' "$*" >&2
	exit 1
}
trap 'status=$?; [ "$status" -eq 0 ] || printf "[interop/setup] FAILED (exit %s) after %ss\n" "$status" "$((SECONDS - START))" >&2' EXIT

# --- Python reference runtime ----------------------------------------------------------------
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; the Python peer needs Python >= 3.11"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
	die "$("$PYTHON" -V 2>&1) is too old: agentruntimecontrolprotocol 1.1.3 requires Python >= 3.11"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
	say "venv: reusing $VENV ($("$VENV/bin/python" -V 2>&1))"
else
	rm -rf "$VENV"
	say "venv: creating $VENV with $("$PYTHON" -V 2>&1)"
	if ! "$PYTHON" -m venv "$VENV"; then
		rm -rf "$VENV"
		if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
			# Debian ships the venv module (ensurepip) separately.
			say "venv: the venv module is missing; installing Debian's python3-venv"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv ||
				die "could not install python3-venv"
			"$PYTHON" -m venv "$VENV" || die "could not create $VENV even after installing python3-venv"
		else
			die "'$PYTHON -m venv' failed; on Debian install python3-venv (apt-get install python3-venv)"
		fi
	fi
fi

say "pip: installing $REQS"
"$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$REQS" ||
	die "pip could not install $REQS into $VENV"
"$VENV/bin/python" - <<'EOF' || die "the Python reference runtime does not import after install"
from importlib.metadata import version
from arcp.runtime import ARCPRuntime, StaticBearerVerifier  # noqa: F401
from arcp._transport.websocket import serve_websocket  # noqa: F401
import websockets  # noqa: F401
assert version("agentruntimecontrolprotocol") == "1.1.3", version("agentruntimecontrolprotocol")
print(f"[interop/setup] python: agentruntimecontrolprotocol {version('agentruntimecontrolprotocol')}, websockets {version('websockets')}")
EOF

# --- Rust reference runtime ------------------------------------------------------------------
command -v cargo >/dev/null 2>&1 || die "cargo not found; the Rust peer needs the Rust toolchain"
say "cargo: building $PEER_DIR (release, --locked) into $CARGO_TARGET_DIR"
(cd "$PEER_DIR" && cargo build --release --locked --quiet) ||
	die "cargo build of interop/rust-peer failed (arcp-runtime =2.0.0 from crates.io)"
[ -x "$RUST_PEER" ] || die "cargo finished but $RUST_PEER is missing"
say "rust: $RUST_PEER"

# --- Smoke: each peer starts and prints its URL line -----------------------------------------
smoke() { # name, command...
	local name="$1" out pid url="" i
	shift
	out="$(mktemp)"
	"$@" --port 0 >"$out" 2>"$out.err" &
	pid=$!
	for i in $(seq 1 100); do
		url="$(sed -n 's/^ARCP_URL=//p' "$out")"
		[ -n "$url" ] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	if [ -z "$url" ]; then
		cat "$out.err" >&2
		rm -f "$out" "$out.err"
		die "$name peer did not print its ARCP_URL line within 10 s"
	fi
	rm -f "$out" "$out.err"
	say "smoke: $name peer listened on $url"
}
if [ "${ARCP_SETUP_SKIP_SMOKE:-0}" != 1 ]; then
	smoke python "$VENV/bin/python" "$HERE/python/server.py"
	smoke rust "$RUST_PEER"
fi

say "done in $((SECONDS - START))s. Start the peers with:"
say "  $VENV/bin/python $HERE/python/server.py --port 0"
say "  $RUST_PEER --port 0"
