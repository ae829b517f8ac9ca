# scripts/pg.sh: sourced by scripts/test. Starts a throwaway PostgreSQL
# cluster on 127.0.0.1 as a non-root user, exports IDEM_TEST_PG_URL, and
# registers its removal. Installs Debian's postgresql package when the
# server binaries are missing.

source "$(dirname "${BASH_SOURCE[0]}")/onexit.sh"

pg_bindir() {
	local d
	for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
		echo "need root (or sudo) to run: $*" >&2
		return 1
	fi
}

pg_start() {
	if [ -n "${PG_DIR:-}" ]; then
		echo "pg_start: a server started here already runs (in $PG_DIR): call pg_stop first" >&2
		return 1
	fi
	local bindir
	if ! bindir=$(pg_bindir); then
		echo "PostgreSQL server binaries not found: installing Debian's postgresql package"
		as_root apt-get update -qq
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
		bindir=$(pg_bindir) || { echo "postgresql installed but initdb not found under /usr/lib/postgresql" >&2; return 1; }
	fi
	PG_DIR=$(mktemp -d /tmp/idem-pg.XXXXXX)
	local runas=()
	if [ "$(id -u)" -eq 0 ]; then
		# initdb refuses to run as root: use a dedicated system user.
		id -u idem-pg >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin idem-pg
		chown idem-pg "$PG_DIR"
		runas=(runuser -u idem-pg --)
	fi
	PG_RUNAS=("${runas[@]}")
	PG_BINDIR=$bindir
	"${runas[@]}" "$bindir/initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 ||
		{ cat "$PG_DIR/initdb.log"; return 1; }
	# A port free when probed can be taken before the server binds it (two
	# runs of scripts/test side by side): on a bind failure, try the next.
	local port started=
	for port in $(seq 55432 55532); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
		rm -f "$PG_DIR/server.log"
		if "${runas[@]}" "$bindir/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $PG_DIR -c max_connections=300 -c shared_buffers=256MB -c fsync=on -c synchronous_commit=on" \
			start >/dev/null; then
			started=1
			break
		fi
		grep -q "Address already in use" "$PG_DIR/server.log" || { cat "$PG_DIR/server.log"; return 1; }
	done
	[ -n "$started" ] || { echo "no free port for PostgreSQL in 55432-55532" >&2; return 1; }
	export IDEM_TEST_PG_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	idem_on_exit pg_stop
	echo "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (data in $PG_DIR, $IDEM_REMOVAL)"
}

pg_stop() {
	[ -n "${PG_DIR:-}" ] || return 0
	"${PG_RUNAS[@]}" "$PG_BINDIR/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$PG_DIR"
	PG_DIR=
}

# pg_restart restarts the cluster pg_start started, as a crash would
# (immediate shutdown, then recovery), for idem torture's pg-restart fault.
# It needs PG_DIR and PG_BINDIR, as pg_start sets them; pass them in the
# environment when it runs in another shell.
pg_restart() {
	[ -n "${PG_DIR:-}" ] && [ -n "${PG_BINDIR:-}" ] || { echo "pg_restart: PG_DIR and PG_BINDIR are not set (run pg_start first)" >&2; return 1; }
	local runas=()
	if [ "$(id -u)" -eq 0 ]; then runas=(runuser -u idem-pg --); fi
	"${runas[@]}" "$PG_BINDIR/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -m immediate -w -t 60 restart >/dev/null ||
		{ tail -n 20 "$PG_DIR/server.log" >&2; return 1; }
}
