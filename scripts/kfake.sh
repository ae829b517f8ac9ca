# scripts/kfake.sh: sourced by scripts/test. Starts franz-go's fake Kafka
# cluster (kfake, transport/kafka/internal/kfakeserver) in a process of its
# own on 127.0.0.1, on a free port, and exports
#
#   IDEM_TEST_KFAKE_URL  kafka://127.0.0.1:<port>
#
# for idem torture on the Kafka transport. No Kafka broker can be
# installed where the tests run; kfake speaks Kafka's protocol and keeps
# everything in memory, so what it proves is the transport's and the
# engine's side (docs/transport-kafka.md, "What kfake stands in for"). The
# suites that need a real broker read IDEM_TEST_KAFKA_URL, which this does
# not set. kfake_stop stops it.

source "$(dirname "${BASH_SOURCE[0]}")/onexit.sh"

kfake_start() {
	if [ -n "${KFAKE_DIR:-}" ]; then
		echo "kfake_start: a kfake started here already runs (in $KFAKE_DIR): call kfake_stop first" >&2
		return 1
	fi
	KFAKE_DIR=$(mktemp -d /tmp/idem-kfake.XXXXXX)
	go build -o "$KFAKE_DIR/kfakeserver" ./transport/kafka/internal/kfakeserver || return 1
	"$KFAKE_DIR/kfakeserver" >"$KFAKE_DIR/url" 2>"$KFAKE_DIR/log" &
	KFAKE_PID=$!
	# Ready once it printed its URL: poll, 30s deadline.
	for _ in $(seq 300); do
		[ -s "$KFAKE_DIR/url" ] && break
		kill -0 "$KFAKE_PID" 2>/dev/null || { cat "$KFAKE_DIR/log" >&2; echo "kfakeserver exited" >&2; return 1; }
		sleep 0.1
	done
	[ -s "$KFAKE_DIR/url" ] || { echo "kfakeserver printed no URL within 30s" >&2; return 1; }
	IDEM_TEST_KFAKE_URL=$(head -n 1 "$KFAKE_DIR/url")
	export IDEM_TEST_KFAKE_URL
	echo "kfake (franz-go's fake Kafka cluster) on ${IDEM_TEST_KFAKE_URL#kafka://}"
	idem_on_exit kfake_stop
}

kfake_stop() {
	[ -n "${KFAKE_DIR:-}" ] || return 0
	if [ -n "${KFAKE_PID:-}" ]; then
		kill "$KFAKE_PID" 2>/dev/null
		wait "$KFAKE_PID" 2>/dev/null
	fi
	rm -rf "$KFAKE_DIR"
	unset KFAKE_DIR KFAKE_PID IDEM_TEST_KFAKE_URL
}
