# scripts/rabbitmq.sh: sourced by scripts/test after scripts/pg.sh. Starts a
# throwaway RabbitMQ node on 127.0.0.1 as a non-root user, independent of the
# system service, and exports for the tests:
#
#   IDEM_TEST_AMQP_URL      amqp://guest:guest@127.0.0.1:<port>/
#   IDEM_TEST_AMQP_RESTART  a script that stops the node and starts it again
#                           (same data), for broker-restart tests
#   IDEM_TEST_AMQP_CTL      a script that runs rabbitmqctl against the node
#
# Installs Debian's rabbitmq-server package with apt-get when it is missing
# (without starting the system service). rabbit_stop stops the node and
# removes its directory.

source "$(dirname "${BASH_SOURCE[0]}")/onexit.sh"

rabbit_bindir() {
	local d
	for d in /usr/lib/rabbitmq/bin /usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin; do
		if [ -x "$d/rabbitmq-server" ] && [ -x "$d/rabbitmqctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# rabbit_free_port prints the first port from $1 on that nothing listens on.
rabbit_free_port() {
	local port
	for port in $(seq "$1" $(($1 + 100))); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return 0; }
	done
	return 1
}

# rabbit_try_start writes a node's files in a new RABBIT_DIR and starts it
# on the first free ports from the bases plus $1, setting port, dist and
# epmd; it fails when the node does not boot.
rabbit_try_start() {
	RABBIT_DIR=$(mktemp -d /tmp/idem-rabbit.XXXXXX)
	local runas=()
	if [ "$(id -u)" -eq 0 ]; then
		# The node runs as the package's system user, never as root.
		id -u rabbitmq >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin rabbitmq
		runas=(runuser -u rabbitmq --)
	fi
	port=$(rabbit_free_port $((55672 + $1))) || { echo "no free port for RabbitMQ near 55672" >&2; return 1; }
	dist=$(rabbit_free_port $((55772 + $1))) || return 1
	epmd=$(rabbit_free_port $((55872 + $1))) || return 1
	mkdir -p "$RABBIT_DIR/home" "$RABBIT_DIR/mnesia" "$RABBIT_DIR/log"
	# The Erlang cookie lives in HOME and must be private to its owner.
	head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$RABBIT_DIR/home/.erlang.cookie"
	chmod 400 "$RABBIT_DIR/home/.erlang.cookie"
	echo '[].' >"$RABBIT_DIR/enabled_plugins"
	cat >"$RABBIT_DIR/rabbitmq.conf" <<-EOF
		listeners.tcp.1 = 127.0.0.1:$port
		log.console = false
		log.file.level = warning
		# The transport's lease (Config.Lease) requeues slow deliveries
		# itself; the broker's timeout is the backstop.
		consumer_timeout = 1800000
	EOF
	cat >"$RABBIT_DIR/env" <<-EOF
		export HOME=$RABBIT_DIR/home
		export ERL_EPMD_PORT=$epmd
		export RABBITMQ_NODENAME=idemtest@localhost
		export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
		export RABBITMQ_NODE_PORT=$port
		export RABBITMQ_DIST_PORT=$dist
		export RABBITMQ_MNESIA_BASE=$RABBIT_DIR/mnesia
		export RABBITMQ_LOG_BASE=$RABBIT_DIR/log
		export RABBITMQ_CONFIG_FILE=$RABBIT_DIR/rabbitmq.conf
		export RABBITMQ_ENABLED_PLUGINS_FILE=$RABBIT_DIR/enabled_plugins
		export RABBITMQ_ADVANCED_CONFIG_FILE=$RABBIT_DIR/advanced.config
	EOF
	echo '[].' >"$RABBIT_DIR/advanced.config"
	# ctl runs rabbitmqctl against this node; start and stop the node.
	cat >"$RABBIT_DIR/ctl" <<-EOF
		#!/bin/sh
		. $RABBIT_DIR/env
		exec ${runas[*]} env HOME=\$HOME ERL_EPMD_PORT=\$ERL_EPMD_PORT $bindir/rabbitmqctl -n \$RABBITMQ_NODENAME "\$@"
	EOF
	cat >"$RABBIT_DIR/start" <<-EOF
		#!/bin/sh
		. $RABBIT_DIR/env
		${runas[*]} env \$(sed -n 's/^export //p' $RABBIT_DIR/env) $bindir/rabbitmq-server >>$RABBIT_DIR/log/stdout.log 2>&1 </dev/null &
		# await_startup fails at once until the node has registered with
		# epmd, then blocks until it has booted: poll it (60s deadline).
		ok=
		for _ in \$(seq 120); do
			if $RABBIT_DIR/ctl await_startup --timeout 60 >/dev/null 2>&1; then ok=1; break; fi
			sleep 0.5
		done
		[ -n "\$ok" ] || exit 1
		# The node's OS pid, for stop to wait on.
		$RABBIT_DIR/ctl eval 'list_to_integer(os:getpid()).' >$RABBIT_DIR/node.pid
	EOF
	cat >"$RABBIT_DIR/stop" <<-EOF
		#!/bin/sh
		pid=\$(cat $RABBIT_DIR/node.pid 2>/dev/null) || exit 0
		$RABBIT_DIR/ctl stop >/dev/null 2>&1
		# Wait (polling, 30s deadline) for the node's process to exit.
		for _ in \$(seq 300); do kill -0 "\$pid" 2>/dev/null || exit 0; sleep 0.1; done
		kill -9 "\$pid" 2>/dev/null
		true
	EOF
	cat >"$RABBIT_DIR/restart" <<-EOF
		#!/bin/sh
		# A full node restart: the process stops (clients see the
		# connection close) and starts again on the same data.
		$RABBIT_DIR/stop && $RABBIT_DIR/start
	EOF
	chmod 755 "$RABBIT_DIR/ctl" "$RABBIT_DIR/start" "$RABBIT_DIR/stop" "$RABBIT_DIR/restart"
	chmod 755 "$RABBIT_DIR"
	[ ${#runas[@]} -eq 0 ] || chown -R rabbitmq "$RABBIT_DIR/home" "$RABBIT_DIR/mnesia" "$RABBIT_DIR/log"
	RABBIT_EPMD_PORT=$epmd
	"$RABBIT_DIR/start"
}

rabbit_start() {
	if [ -n "${RABBIT_DIR:-}" ]; then
		echo "rabbit_start: a server started here already runs (in $RABBIT_DIR): call rabbit_stop first" >&2
		return 1
	fi
	local bindir started=$SECONDS
	if ! bindir=$(rabbit_bindir); then
		echo "RabbitMQ not found: installing Debian's rabbitmq-server package"
		type as_root >/dev/null 2>&1 || as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
		as_root apt-get update -qq
		# policy-rc.d exit 101: the package must not start its system
		# service (it would take port 5672 and outlive the tests).
		local policy=/usr/sbin/policy-rc.d restore=""
		if [ ! -e "$policy" ]; then
			as_root sh -c "printf '#!/bin/sh\nexit 101\n' >$policy && chmod +x $policy"
			restore=1
		fi
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
		[ -z "$restore" ] || as_root rm -f "$policy"
		bindir=$(rabbit_bindir) || { echo "rabbitmq-server installed but its scripts not found under /usr/lib/rabbitmq" >&2; return 1; }
	fi
	local port dist epmd attempt
	# A port free when probed can be taken before the node binds it (two
	# runs of scripts/test side by side): on a port clash, move on.
	for attempt in 0 1 2 3 4; do
		rabbit_try_start $((attempt * 7)) && break
		if ! grep -qsE "already used|in use|eaddrinuse" "$RABBIT_DIR"/log/*.log "$RABBIT_DIR"/log/stdout.log || [ "$attempt" -eq 4 ]; then
			cat "$RABBIT_DIR"/log/*.log >&2
			return 1
		fi
		ERL_EPMD_PORT=$epmd epmd -kill >/dev/null 2>&1 || true
		rm -rf "$RABBIT_DIR"
	done
	export IDEM_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/"
	export IDEM_TEST_AMQP_RESTART="$RABBIT_DIR/restart"
	export IDEM_TEST_AMQP_CTL="$RABBIT_DIR/ctl"
	idem_on_exit rabbit_stop
	echo "RabbitMQ $("$RABBIT_DIR/ctl" version 2>/dev/null) on 127.0.0.1:$port, started in $((SECONDS - started))s (data in $RABBIT_DIR, $IDEM_REMOVAL)"
}

rabbit_restart() {
	[ -n "${RABBIT_DIR:-}" ] || { echo "rabbit_restart: no node started" >&2; return 1; }
	"$RABBIT_DIR/restart"
}

rabbit_stop() {
	[ -n "${RABBIT_DIR:-}" ] || return 0
	"$RABBIT_DIR/stop"
	# The node started its own epmd on a private port: stop it too.
	ERL_EPMD_PORT=$RABBIT_EPMD_PORT epmd -kill >/dev/null 2>&1 || true
	rm -rf "$RABBIT_DIR"
	RABBIT_DIR=
}
