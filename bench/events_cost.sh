#!/bin/sh
# SPDX-License-Identifier: MIT
# The cost of publishing KV events: `kvpool sim` on a trace with and
# without --publish (sha256_cbor hashes both times, so only publishing
# differs), a subscriber attached to the publishing runs (it receives
# every batch, as a router's socket does, without decoding), the two
# interleaved and their order alternated, REPS pairs.  Prints each run,
# the medians and the throughput ratio (publishing / not).
#
# Usage: bench/events_cost.sh [TRACE] [REPS] [SIM OPTIONS...]
#   (run from the build directory; TRACE defaults to
#   ../shared/traces/conversation_trace.jsonl beside the source tree)
set -e
b=${top_builddir:-.}
s=$(cd "$(dirname "$0")/.." && pwd)
trace=${1:-$s/../shared/traces/conversation_trace.jsonl}
reps=${2:-5}
[ $# -gt 2 ] && shift 2 || set --
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$("$PY" -c 'import socket; x = socket.socket(); x.bind(("127.0.0.1", 0)); print(x.getsockname()[1])')
ep=tcp://127.0.0.1:$port

sim() {
	"$b/tools/kvpool" sim --trace "$trace" --hash sha256_cbor --json "$@" |
		"$PY" -c 'import json, sys
d = json.load(sys.stdin)
e = d.get("events")
print(d["kvpool"]["seconds"], e["batches"] if e else "-",
      e["dropped"] if e else "-")'
}

receiver() {
	"$PY" -c 'import sys, time, zmq
s = zmq.Context().socket(zmq.SUB)
s.setsockopt(zmq.RCVHWM, 0)
s.setsockopt_string(zmq.SUBSCRIBE, "")
s.connect(sys.argv[1])
n = nbytes = 0
while True:
    if not s.poll(3000) and n:
        break
    f = s.recv_multipart(copy=False)
    n += 1
    nbytes += len(f[2].buffer)
print(n, nbytes)' "$ep" >"$tmp/recv" &
	recvpid=$!
	sleep 0.3
}

: >"$tmp/plain"
: >"$tmp/pub"
for i in $(seq 1 "$reps"); do
	for which in $([ $((i % 2)) -eq 1 ] && echo plain pub || echo pub plain); do
		if [ "$which" = plain ]; then
			r=$(sim "$@")
		else
			receiver
			r=$(sim --publish "$ep" --replay tcp://127.0.0.1:$((port + 1)) "$@")
			wait $recvpid
			r="$r received $(cat "$tmp/recv")"
		fi
		echo "$which $i: $r"
		echo "$r" | cut -d' ' -f1 >>"$tmp/$which"
	done
done
"$PY" - "$tmp/plain" "$tmp/pub" <<'PYEOF'
import statistics, sys
plain = [float(x) for x in open(sys.argv[1]).read().split()]
pub = [float(x) for x in open(sys.argv[2]).read().split()]
mp, mq = statistics.median(plain), statistics.median(pub)
print("median replay: %.3f s without --publish, %.3f s with (%d pairs)"
      % (mp, mq, len(plain)))
print("throughput with / without publishing: %.3f (cost %.1f%%)"
      % (mp / mq, 100 * (1 - mp / mq)))
PYEOF
