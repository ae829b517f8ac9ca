# scripts/redis.sh: sourced by scripts/test, or by hand (see
# examples/helixqueue/README.md). Starts a throwaway Redis server
# on 127.0.0.1 on a free port, with a temporary data directory and the
# settings transport/redisstreams requires (appendonly yes, appendfsync
# always), independent of the system service, and exports for the tests:
#
#   IDEM_TEST_REDIS_URL      redis://127.0.0.1:<port>/0
#   IDEM_TEST_REDIS_RESTART  a script that kills the server with SIGKILL (a
#                            crash) and starts it again on the same data: the
#                            append-only file brings back every acknowledged
#                            write
#   IDEM_TEST_REDIS_SERVER   the redis-server binary, for tests that start a
#                            private server of their own (other settings)
#
# Installs Debian's redis-server package with apt-get when it is missing
# (without starting the system service). redis_stop stops the server and
# removes its directory: scripts/test calls it from its exit trap, and a
# shell that has no exit trap when it calls redis_start gets one that calls
# it (scripts/onexit.sh).

source "$(dirname "${BASH_SOURCE[0]}")/onexit.sh"

redis_free_port() {
	local port
	for port in $(seq "$1" $(($1 + 100))); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return 0; }
	done
	return 1
}

redis_start() {
	local started=$SECONDS
	if [ -n "${REDIS_DIR:-}" ]; then
		echo "redis_start: a server started here already runs (data in $REDIS_DIR): call redis_stop first" >&2
		return 1
	fi
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		echo "Redis not found: installing Debian's redis-server package"
		type as_root >/dev/null 2>&1 || as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
		as_root apt-get update -qq
		# policy-rc.d exit 101: the package must not start its system
		# service (it would take port 6379 and outlive the tests).
		local policy=/usr/sbin/policy-rc.d restore=""
		if [ ! -e "$policy" ]; then
			as_root sh -c "printf '#!/bin/sh\nexit 101\n' >$policy && chmod +x $policy"
			restore=1
		fi
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
		[ -z "$restore" ] || as_root rm -f "$policy"
		command -v redis-server >/dev/null || { echo "redis-server installed but not on PATH" >&2; return 1; }
	fi
	REDIS_DIR=$(mktemp -d /tmp/idem-redis.XXXXXX)
	local runas=()
	if [ "$(id -u)" -eq 0 ]; then
		# The server runs as the package's system user, never as root.
		id -u redis >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin redis
		runas=(runuser -u redis --)
	fi
	local port
	port=$(redis_free_port 56379) || { echo "no free port for Redis near 56379" >&2; return 1; }
	mkdir -p "$REDIS_DIR/data"
	cat >"$REDIS_DIR/redis.conf" <<-EOF
		bind 127.0.0.1
		port $port
		dir $REDIS_DIR/data
		pidfile $REDIS_DIR/redis.pid
		logfile $REDIS_DIR/redis.log
		daemonize yes
		# Every acknowledged write is in the append-only file, fsynced,
		# before the client gets its reply: what redisstreams requires.
		appendonly yes
		appendfsync always
		save ""
		maxmemory-policy noeviction
	EOF
	cat >"$REDIS_DIR/start" <<-EOF
		#!/bin/sh
		${runas[*]} redis-server $REDIS_DIR/redis.conf || exit 1
		# Ready once PING answers PONG (not LOADING): poll, 60s deadline.
		for _ in \$(seq 600); do
			[ "\$(redis-cli -h 127.0.0.1 -p $port ping 2>/dev/null)" = PONG ] && exit 0
			sleep 0.1
		done
		exit 1
	EOF
	cat >"$REDIS_DIR/stop" <<-EOF
		#!/bin/sh
		# SIGKILL, as a crash would: nothing is flushed on the way out.
		pid=\$(cat $REDIS_DIR/redis.pid 2>/dev/null) || exit 0
		kill -9 "\$pid" 2>/dev/null || exit 0
		# Wait (polling, 30s deadline) for the process to be gone.
		for _ in \$(seq 300); do kill -0 "\$pid" 2>/dev/null || { rm -f $REDIS_DIR/redis.pid; exit 0; }; sleep 0.1; done
		exit 1
	EOF
	cat >"$REDIS_DIR/restart" <<-EOF
		#!/bin/sh
		# A crash and a restart on the same data: clients see their
		# connections fail, then reconnect; the append-only file restores
		# every acknowledged write.
		$REDIS_DIR/stop && $REDIS_DIR/start
	EOF
	chmod 755 "$REDIS_DIR/start" "$REDIS_DIR/stop" "$REDIS_DIR/restart" "$REDIS_DIR"
	# The pid file and the log are written beside the scripts.
	[ ${#runas[@]} -eq 0 ] || chown -R redis "$REDIS_DIR"
	if ! "$REDIS_DIR/start"; then
		cat "$REDIS_DIR/redis.log" >&2
		return 1
	fi
	export IDEM_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
	export IDEM_TEST_REDIS_RESTART="$REDIS_DIR/restart"
	IDEM_TEST_REDIS_SERVER=$(command -v redis-server)
	export IDEM_TEST_REDIS_SERVER
	idem_on_exit redis_stop
	echo "Redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port, started in $((SECONDS - started))s (data in $REDIS_DIR, $IDEM_REMOVAL)"
}

redis_restart() {
	[ -n "${REDIS_DIR:-}" ] || { echo "redis_restart: no server started" >&2; return 1; }
	"$REDIS_DIR/restart"
}

redis_stop() {
	[ -n "${REDIS_DIR:-}" ] || return 0
	"$REDIS_DIR/stop" || true
	rm -rf "$REDIS_DIR"
	REDIS_DIR=
}
