# scripts/pgbouncer.sh: sourced by scripts/test after scripts/pg.sh (and
# pg_start). Starts a throwaway PgBouncer on 127.0.0.1 on a free port, in
# transaction pooling mode, in front of the test PostgreSQL, and exports
#
#   IDEM_TEST_PGBOUNCER_URL  postgres://postgres@127.0.0.1:<port>/postgres?sslmode=disable
#
# for the tests of pgstore through a transaction pooler (pooler_test.go,
# TestConformanceThroughPgBouncer) and the torture run through it. The
# databases idem_session_mode and idem_statement_mode of the same
# PgBouncer are PostgreSQL's postgres database in session pooling mode and
# in statement pooling mode, which pgstore refuses.
# Installs Debian's pgbouncer package with apt-get when it is
# missing (without starting its system service). pgbouncer_stop stops it
# and removes its directory.

source "$(dirname "${BASH_SOURCE[0]}")/onexit.sh"

pgbouncer_start() {
	if [ -n "${PGBOUNCER_DIR:-}" ]; then
		echo "pgbouncer_start: a server started here already runs (in $PGBOUNCER_DIR): call pgbouncer_stop first" >&2
		return 1
	fi
	[ -n "${IDEM_TEST_PG_URL:-}" ] || { echo "pgbouncer_start: IDEM_TEST_PG_URL is not set (run pg_start first)" >&2; return 1; }
	if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
		echo "PgBouncer not found: installing Debian's pgbouncer package"
		type as_root >/dev/null 2>&1 || as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
		as_root apt-get update -qq
		# policy-rc.d exit 101: the package must not start its system
		# service (it would take port 6432 and outlive the tests).
		local policy=/usr/sbin/policy-rc.d restore=""
		if [ ! -e "$policy" ]; then
			as_root sh -c "printf '#!/bin/sh\nexit 101\n' >$policy && chmod +x $policy"
			restore=1
		fi
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
		[ -z "$restore" ] || as_root rm -f "$policy"
	fi
	local bin
	bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
	[ -x "$bin" ] || { echo "pgbouncer installed but not found" >&2; return 1; }
	PGBOUNCER_DIR=$(mktemp -d /tmp/idem-pgbouncer.XXXXXX)
	local runas=()
	if [ "$(id -u)" -eq 0 ]; then
		# PgBouncer refuses to run as root: use pg.sh's system user.
		id -u idem-pg >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin idem-pg
		chown idem-pg "$PGBOUNCER_DIR"
		runas=(runuser -u idem-pg --)
	fi
	local pgport=${IDEM_TEST_PG_URL##*@127.0.0.1:}
	pgport=${pgport%%/*}
	echo '"postgres" ""' >"$PGBOUNCER_DIR/users.txt"
	local port started=
	for port in $(seq 56432 56532); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
		cat >"$PGBOUNCER_DIR/pgbouncer.ini" <<-EOF
			[databases]
			idem_session_mode = host=127.0.0.1 port=$pgport dbname=postgres pool_mode=session
			idem_statement_mode = host=127.0.0.1 port=$pgport dbname=postgres pool_mode=statement
			* = host=127.0.0.1 port=$pgport
			[pgbouncer]
			listen_addr = 127.0.0.1
			listen_port = $port
			unix_socket_dir =
			auth_type = trust
			auth_file = $PGBOUNCER_DIR/users.txt
			pool_mode = transaction
			max_client_conn = 200
			default_pool_size = 20
			logfile = $PGBOUNCER_DIR/pgbouncer.log
			pidfile = $PGBOUNCER_DIR/pgbouncer.pid
		EOF
		[ "$(id -u)" -ne 0 ] || chown idem-pg "$PGBOUNCER_DIR"/*
		if "${runas[@]}" "$bin" -d "$PGBOUNCER_DIR/pgbouncer.ini" >/dev/null 2>&1; then
			local i
			for i in $(seq 1 100); do
				(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && { started=1; break; }
				sleep 0.1
			done
			[ -n "$started" ] && break
		fi
		grep -q "Address already in use" "$PGBOUNCER_DIR/pgbouncer.log" 2>/dev/null || { cat "$PGBOUNCER_DIR/pgbouncer.log" >&2; return 1; }
	done
	[ -n "$started" ] || { echo "no free port for PgBouncer in 56432-56532" >&2; return 1; }
	export IDEM_TEST_PGBOUNCER_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	idem_on_exit pgbouncer_stop
	echo "PgBouncer $("$bin" --version | awk 'NR==1{print $2}') on 127.0.0.1:$port, transaction pooling (session and statement pooling for the databases idem_session_mode and idem_statement_mode), in front of 127.0.0.1:$pgport (in $PGBOUNCER_DIR, $IDEM_REMOVAL)"
}

pgbouncer_stop() {
	[ -n "${PGBOUNCER_DIR:-}" ] || return 0
	if [ -f "$PGBOUNCER_DIR/pgbouncer.pid" ]; then
		kill "$(cat "$PGBOUNCER_DIR/pgbouncer.pid")" 2>/dev/null || true
	fi
	rm -rf "$PGBOUNCER_DIR"
	PGBOUNCER_DIR=
}
