#!/usr/bin/env bash
# demo.sh (`make demo`): build hermes-bridge and fake-hermes, start both on free
# loopback ports with a throwaway key and data directory, send one streaming action,
# and stop everything again. Needs only Go and bash; nothing is installed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}

# Keep the demo hermetic: ignore NATS_* and HERMES_* from the caller's environment.
while read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(NATS_|HERMES_)' || true)

work=$(mktemp -d "${TMPDIR:-/tmp}/hermes-bridge-demo.XXXXXX")
fake_pid= bridge_pid=

stop() { # pid: SIGTERM, then wait for it to exit
	local pid=$1
	[[ -n $pid ]] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	stop "$bridge_pid" # the bridge first: it drains, then stops its embedded NATS server
	stop "$fake_pid"
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for FILE PATTERN PID NAME: poll FILE until PATTERN appears (10 s at most),
# failing early if process PID has exited.
wait_for() {
	local file=$1 pattern=$2 pid=$3 name=$4 i
	for ((i = 0; i < 200; i++)); do
		if grep -qE -- "$pattern" "$file" 2>/dev/null; then
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "demo: $name exited before it was ready; its output:" >&2
			cat "$file" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "demo: timed out waiting for $name; its output:" >&2
	cat "$file" >&2
	return 1
}

echo "==> building ./bin/hermes-bridge and ./bin/fake-hermes"
mkdir -p bin
# The same command as make build, so that either reuses the other's binaries (go build
# skips the link when ./bin is up to date).
version=$(git describe --tags --always --dirty 2>/dev/null || true)
"$GO" build -ldflags "${version:+-X main.version=$version}" -o bin/ ./cmd/...

# A random key, passed through the environment (not argv, which ps shows).
key="demo-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

echo "==> starting fake-hermes (a fake Hermes API server) on a free loopback port"
FAKE_HERMES_KEY=$key ./bin/fake-hermes --addr 127.0.0.1:0 --delta-delay 150ms >"$work/fake.log" 2>&1 &
fake_pid=$!
wait_for "$work/fake.log" 'listening on http://' "$fake_pid" fake-hermes
hermes_url=$(grep -oE 'http://[0-9.]+:[0-9]+' "$work/fake.log" | head -n 1)
echo "    fake-hermes at $hermes_url"

echo "==> starting hermes-bridge run (embedded NATS on a free port, store in $work/nats)"
HERMES_URL=$hermes_url HERMES_API_KEY=$key \
	HERMES_BRIDGE_DATA_DIR="$work/nats" HERMES_BRIDGE_NATS_PORT=-1 \
	HERMES_BRIDGE_SHUTDOWN_GRACE=5s HERMES_BRIDGE_LOG_FORMAT=console \
	./bin/hermes-bridge run >"$work/bridge.log" 2>&1 &
bridge_pid=$!
wait_for "$work/bridge.log" 'embedded NATS server listening on nats://' "$bridge_pid" hermes-bridge
nats_url=$(grep -oE 'nats://[0-9.]+:[0-9]+' "$work/bridge.log" | head -n 1)
wait_for "$work/bridge.log" 'bridge started' "$bridge_pid" hermes-bridge
echo "    hermes-bridge ready; NATS at $nats_url"

echo "==> hermes-bridge call --op chat_stream --prompt \"Summarize the incident notes.\""
echo
status=0
NATS_URL=$nats_url ./bin/hermes-bridge call --op chat_stream --prompt "Summarize the incident notes." || status=$?
echo

echo "==> bridge log (last lines)"
tail -n 3 "$work/bridge.log" | sed 's/^/    /'
echo "==> stopping hermes-bridge and fake-hermes"
exit "$status"
