#!/usr/bin/env bash
# End-to-end check of `vrdma sandbox` on this machine (needs root, iproute2, ping):
# up with 2 hosts x 2 containers, addresses, pings on one host and across hosts,
# list, status, exec exit codes, down (twice), and down after a `vrdma sandbox up`
# killed with SIGKILL half-way. Leaves no sandbox namespace (vrdma-h*, vrdma-net)
# behind, even on failure.
#
#   scripts/sandbox-smoke.sh [path/to/vrdma]
#
# vrdmad is found as `vrdma sandbox up` finds it ($VRDMA_DAEMON overrides).
# Exit: 0 passed, 1 failed, 77 skipped (not root, or a sandbox is already up).
set -u

VRDMA=${1:-vrdma}
command -v "$VRDMA" >/dev/null || { echo "sandbox-smoke: $VRDMA not found" >&2; exit 1; }
VRDMA=$(command -v "$VRDMA")
[ "$(id -u)" = 0 ] || { echo "sandbox-smoke: skipped: must run as root" >&2; exit 77; }
sandbox_netns='^vrdma-(net|h[0-9]+(c[0-9]+)?)$'
if ls /run/netns 2>/dev/null | grep -Eq "$sandbox_netns"; then
  echo "sandbox-smoke: skipped: a sandbox is up (not ours to touch)" >&2
  exit 77
fi

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; }
leftover_netns() { ls /run/netns 2>/dev/null | grep -Ec "$sandbox_netns"; }
out=$(mktemp)
trap '"$VRDMA" sandbox down >/dev/null 2>&1; rm -f "$out"' EXIT

# expect DESCRIPTION WANTED_EXIT_CODE COMMAND...
expect() {
  local what=$1 want=$2
  shift 2
  "$@" >"$out" 2>&1
  local rc=$?
  if [ "$rc" = "$want" ]; then pass "$what"; else
    fail "$what: exit $rc, wanted $want"
    sed 's/^/      /' "$out" >&2
  fi
}

expect "up --hosts 2 --containers 2" 0 "$VRDMA" sandbox up --hosts 2 --containers 2
expect "second up is refused" 1 "$VRDMA" sandbox up
grep -q "sandbox already up" "$out" || fail "second up: wrong message"

"$VRDMA" sandbox exec h0c1 -- ip -4 -o addr show dev eth0 >"$out" 2>&1
if grep -q 'inet 10.77.0.11/24' "$out"; then pass "h0c1 has 10.77.0.11"
else fail "h0c1 address: $(cat "$out")"; fi

expect "ping h0c0 -> h0c1 (same host)" 0 "$VRDMA" sandbox exec h0c0 -- ping -c1 -W2 10.77.0.11
expect "ping h0c0 -> h1c0 (across hosts)" 0 "$VRDMA" sandbox exec h0c0 -- ping -c1 -W2 10.77.1.10
expect "ping h1c1 -> h0c1 (across hosts)" 0 "$VRDMA" sandbox exec h1c1 -- ping -c1 -W2 10.77.0.11
expect "exec passes the exit code through" 42 "$VRDMA" sandbox exec h0c0 -- sh -c 'exit 42'
expect "exec of a missing command exits 127" 127 "$VRDMA" sandbox exec h0c0 -- /nonexistent
expect "exec of an unknown name is a usage error" 2 "$VRDMA" sandbox exec h9c9 -- true

"$VRDMA" sandbox exec h1c0 -- sh -c 'echo "$VRDMA_SOCKET"' >"$out" 2>/dev/null
if grep -q '/h1/vrdmad.sock$' "$out"; then pass "exec sets VRDMA_SOCKET"
else fail "VRDMA_SOCKET in h1c0: $(cat "$out")"; fi

"$VRDMA" sandbox list >"$out" 2>&1
if [ "$(grep -c 'running (pid' "$out")" = 6 ]; then pass "list shows 6 rows, daemons running"
else fail "list: $(cat "$out")"; fi
expect "list --json" 0 "$VRDMA" sandbox list --json
expect "status --all" 0 "$VRDMA" status --all

# Something left running inside a container must not stop `down`.
"$VRDMA" sandbox exec h0c0 -- sleep 600 >/dev/null 2>&1 &
sleep 0.3
expect "down" 0 "$VRDMA" sandbox down
[ "$(leftover_netns)" = 0 ] && pass "no sandbox namespace left" || fail "namespaces left after down"
expect "second down" 0 "$VRDMA" sandbox down
grep -q "nothing" "$out" || fail "second down: wrong message"
wait

# A `vrdma sandbox up` killed half-way, then `down`.
"$VRDMA" sandbox up --hosts 4 --containers 16 >/dev/null 2>&1 &
up_pid=$!
sleep 0.7
kill -9 "$up_pid" 2>/dev/null
wait "$up_pid" 2>/dev/null
echo "      (killed up with $(leftover_netns) namespaces made)"
expect "down after up was killed" 0 "$VRDMA" sandbox down
[ "$(leftover_netns)" = 0 ] && pass "no sandbox namespace left" || fail "namespaces left after down"

if [ "$failures" = 0 ]; then echo "sandbox-smoke: all passed"; exit 0; fi
echo "sandbox-smoke: $failures failed" >&2
exit 1
