#!/bin/sh
# SPDX-License-Identifier: MIT
# `kvpool sim --publish` against the Python subscriber example
# (examples/kv_subscriber.py) over 127.0.0.1: every BlockStored hash is
# recomputed from its tokens (vLLM's sha256_cbor), and the cached set the
# events rebuild must equal the sim's at the end:
#   1. a replay that evicts (BlockRemoved), subscriber attached;
#   2. a forced gap: PUB and SUB high-water marks of 1 and a subscriber
#      that stalls, so the PUB socket drops batches; replay fills them.
# Bounded in time (each process under `timeout`).  Skips (77) without
# python3-zmq / python3-msgpack.
b=${top_builddir:-.}
s=${top_srcdir:-.}
. "$s/tests/python_with.sh"
PY=$(python_with zmq,msgpack)
"$PY" -c "import zmq, msgpack" 2>/dev/null || {
	echo "SKIP: python3-zmq and python3-msgpack are needed"
	exit 77
}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# Two free ports on 127.0.0.1 (bound by nobody a moment ago).
ports() {
	"$PY" -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))'
}

# run NAME "SIM OPTIONS" "SUBSCRIBER OPTIONS"
run() {
	set -- "$1" "$2" "$3" $(ports)
	pub=tcp://127.0.0.1:$4
	rep=tcp://127.0.0.1:$5
	json=$tmp/$1.json
	timeout 120 "$PY" "$s/examples/kv_subscriber.py" --sub "$pub" \
		--replay "$rep" --hash-seed 7 --expect-json "$json" \
		--timeout 100 $3 >"$tmp/$1.sub" 2>&1 &
	subpid=$!
	sleep 0.5
	# shellcheck disable=SC2086
	timeout 120 "$b/tools/kvpool" sim --publish "$pub" --replay "$rep" \
		--hash sha256_cbor --hash-seed 7 --linger 8 --json $2 \
		>"$json" 2>"$tmp/$1.err" &
	simpid=$!
	wait $subpid
	subrc=$?
	kill $simpid 2>/dev/null
	wait $simpid 2>/dev/null
	cat "$tmp/$1.sub"
	if [ $subrc -ne 0 ]; then
		echo "test_events_sim: $1: subscriber failed ($subrc)"
		cat "$tmp/$1.err"
		fail=1
	fi
	grep -q '"dropped": 0,' "$json" || {
		echo "test_events_sim: $1: the publisher dropped events"
		fail=1
	}
}

run evict "--trace $s/tests/data/sim_small.jsonl --blocks 400" ""
run gap "--requests 2000 --blocks 1500 --pub-hwm 1" \
	"--rcvhwm 1 --rcvbuf 2048 --no-initial-replay --stall 3 --min-gaps 1"
exit $fail
