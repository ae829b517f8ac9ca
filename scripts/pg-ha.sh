# scripts/pg-ha.sh: sourced by scripts/test (or by hand). Starts a
# throwaway etcd and a three-node Patroni cluster of PostgreSQL on
# 127.0.0.1, with synchronous replication (synchronous_mode: true), data in
# a mktemp directory, and registers its removal. Installs Debian's patroni
# and etcd-server packages with apt-get when they are missing (without
# starting their system services). As root, every server runs as the
# system user idem-pg, as in scripts/pg.sh. pg_ha_start exports
#
#   IDEM_TEST_PG_HA_URL      postgres://postgres@127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/postgres?sslmode=disable&target_session_attrs=read-write
#   IDEM_TEST_PG_HA_PATRONI  the nodes' Patroni REST APIs, http://127.0.0.1:R1,…,R3
#                            (idem torture --faults failover --patroni "$IDEM_TEST_PG_HA_PATRONI")
#   IDEM_TEST_PG_HA_PATRONICTL_CONFIG  a node's Patroni config, for patronictl -c
#   IDEM_TEST_PG_HA_DATA     the nodes' data directories, comma-separated
#
# and returns once a leader accepts writes and a synchronous standby
# streams from it. pg_ha_stop stops the cluster and etcd and removes the
# directory. Timeouts are small (ttl 10 s, loop_wait 1 s, retry_timeout
# 4 s) so that a failover takes seconds; primary_start_timeout 0 makes a
# crashed primary fail over at once instead of restarting in place.

source "$(dirname "${BASH_SOURCE[0]}")/onexit.sh"
source "$(dirname "${BASH_SOURCE[0]}")/pg.sh"

# pg_ha_install installs patroni and etcd-server with apt-get, with a
# policy-rc.d that refuses their system services (they would take etcd's
# port 2379 and outlive the tests).
pg_ha_install() {
	command -v patroni >/dev/null && command -v etcd >/dev/null && pg_bindir >/dev/null && return 0
	echo "Patroni, etcd or PostgreSQL not found: installing Debian's patroni, etcd-server and postgresql packages"
	as_root apt-get update -qq
	local policy=/usr/sbin/policy-rc.d restore=""
	if [ ! -e "$policy" ]; then
		as_root sh -c "printf '#!/bin/sh\nexit 101\n' >$policy && chmod +x $policy"
		restore=1
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server postgresql >/dev/null
	[ -z "$restore" ] || as_root rm -f "$policy"
	command -v patroni >/dev/null && command -v etcd >/dev/null && pg_bindir >/dev/null ||
		{ echo "patroni, etcd-server and postgresql installed but patroni, etcd or initdb not found" >&2; return 1; }
}

# pg_ha_free_ports N FROM prints N ports from FROM upwards that nothing
# listens on.
pg_ha_free_ports() {
	local n=$1 port=$2
	while [ "$n" -gt 0 ] && [ "$port" -lt 65000 ]; do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			n=$((n - 1))
		fi
		port=$((port + 1))
	done
}

# pg_ha_node_config NAME PGPORT RESTPORT writes NAME's Patroni config.
pg_ha_node_config() {
	local name=$1 pgport=$2 restport=$3 bindir
	bindir=$(pg_bindir)
	mkdir -p "$PG_HA_DIR/$name"
	cat >"$PG_HA_DIR/$name.yml" <<-EOF
		scope: idem-ha
		name: $name
		log:
		  level: INFO
		  dir: $PG_HA_DIR/$name
		restapi:
		  listen: 127.0.0.1:$restport
		  connect_address: 127.0.0.1:$restport
		etcd3:
		  hosts: 127.0.0.1:$PG_HA_ETCD_PORT
		bootstrap:
		  dcs:
		    ttl: 10
		    loop_wait: 1
		    retry_timeout: 4
		    maximum_lag_on_failover: 1048576
		    synchronous_mode: true
		    primary_start_timeout: 0
		    postgresql:
		      use_pg_rewind: true
		      use_slots: true
		      parameters:
		        max_connections: 300
		        shared_buffers: 32MB
		        track_commit_timestamp: 'on'
		        wal_keep_size: 256MB
		        max_wal_senders: 10
		        max_replication_slots: 10
		  initdb:
		    - encoding: UTF8
		    - locale: C.UTF-8
		    - data-checksums
		postgresql:
		  listen: 127.0.0.1:$pgport
		  connect_address: 127.0.0.1:$pgport
		  data_dir: $PG_HA_DIR/$name/data
		  bin_dir: $bindir
		  pgpass: $PG_HA_DIR/$name/pgpass
		  authentication:
		    superuser:
		      username: postgres
		    replication:
		      username: replicator
		    rewind:
		      username: postgres
		  parameters:
		    unix_socket_directories: $PG_HA_DIR/$name
		  pg_hba:
		    - local all all trust
		    - host all all 127.0.0.1/32 trust
		    - host replication all 127.0.0.1/32 trust
	EOF
}

# pg_ha_spawn PIDFILE LOG CMD... starts CMD in the background as the
# cluster's user, its pid (the command's own, not runuser's) in PIDFILE.
pg_ha_spawn() {
	local pidfile=$1 log=$2
	shift 2
	"${PG_HA_RUNAS[@]}" sh -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >"$log" 2>&1 </dev/null &
}

# pg_ha_cluster_json prints GET /cluster of the first node that answers.
pg_ha_cluster_json() {
	local api
	for api in ${IDEM_TEST_PG_HA_PATRONI//,/ }; do
		curl -fsS --max-time 2 "$api/cluster" 2>/dev/null && return 0
	done
	return 1
}

# pg_ha_wait_ready waits up to $1 seconds for a leader that accepts writes
# and a synchronous standby streaming from it, with every node running.
pg_ha_wait_ready() {
	local deadline=$((SECONDS + $1)) psql
	psql="$(pg_bindir)/psql"
	[ -x "$psql" ] || psql=psql
	while [ $SECONDS -lt $deadline ]; do
		if pg_ha_cluster_json | python3 -c '
import json, sys
m = json.load(sys.stdin)["members"]
ok = len(m) == 3 and all(x.get("state") in ("running", "streaming") for x in m)
ok = ok and any(x["role"] == "leader" for x in m) and any(x["role"] == "sync_standby" for x in m)
sys.exit(0 if ok else 1)' 2>/dev/null &&
			"$psql" "$IDEM_TEST_PG_HA_URL&connect_timeout=2" -qAtc "CREATE TEMP TABLE ready (x int); INSERT INTO ready VALUES (1)" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	return 1
}

pg_ha_start() {
	if [ -n "${PG_HA_DIR:-}" ]; then
		echo "pg_ha_start: a cluster started here already runs (in $PG_HA_DIR): call pg_ha_stop first" >&2
		return 1
	fi
	pg_ha_install || return 1
	PG_HA_DIR=$(mktemp -d /tmp/idem-pg-ha.XXXXXX)
	PG_HA_RUNAS=()
	if [ "$(id -u)" -eq 0 ]; then
		# initdb and Patroni refuse to run as root: use pg.sh's system user.
		# setpriv execs (runuser would stay the parent, and stop itself
		# when the failover fault freezes its Patroni agent with SIGSTOP).
		id -u idem-pg >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin idem-pg
		PG_HA_RUNAS=(setpriv --reuid idem-pg --regid idem-pg --init-groups --)
	fi
	local ports
	ports=($(pg_ha_free_ports 2 52379) $(pg_ha_free_ports 3 57432) $(pg_ha_free_ports 3 58008))
	[ ${#ports[@]} -eq 8 ] || { echo "pg_ha_start: not enough free ports on 127.0.0.1" >&2; return 1; }
	PG_HA_ETCD_PORT=${ports[0]}
	local peer=${ports[1]} i
	PG_HA_PGPORTS=("${ports[@]:2:3}")
	local rest=("${ports[@]:5:3}")
	mkdir -p "$PG_HA_DIR/etcd"
	for i in 1 2 3; do pg_ha_node_config "node$i" "${PG_HA_PGPORTS[$((i - 1))]}" "${rest[$((i - 1))]}"; done
	[ "$(id -u)" -ne 0 ] || chown -R idem-pg "$PG_HA_DIR"
	chmod 700 "$PG_HA_DIR"/node*
	pg_ha_spawn "$PG_HA_DIR/etcd.pid" "$PG_HA_DIR/etcd.log" etcd --name idem-ha --data-dir "$PG_HA_DIR/etcd/data" \
		--listen-client-urls "http://127.0.0.1:$PG_HA_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$PG_HA_ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--initial-cluster "idem-ha=http://127.0.0.1:$peer" --log-level warn
	for i in $(seq 1 100); do
		curl -fsS --max-time 1 "http://127.0.0.1:$PG_HA_ETCD_PORT/health" >/dev/null 2>&1 && break
		sleep 0.1
	done
	curl -fsS --max-time 1 "http://127.0.0.1:$PG_HA_ETCD_PORT/health" >/dev/null 2>&1 ||
		{ cat "$PG_HA_DIR/etcd.log" >&2; pg_ha_stop; return 1; }
	export IDEM_TEST_PG_HA_URL="postgres://postgres@127.0.0.1:${PG_HA_PGPORTS[0]},127.0.0.1:${PG_HA_PGPORTS[1]},127.0.0.1:${PG_HA_PGPORTS[2]}/postgres?sslmode=disable&target_session_attrs=read-write"
	export IDEM_TEST_PG_HA_PATRONI="http://127.0.0.1:${rest[0]},http://127.0.0.1:${rest[1]},http://127.0.0.1:${rest[2]}"
	export IDEM_TEST_PG_HA_PATRONICTL_CONFIG="$PG_HA_DIR/node1.yml"
	export IDEM_TEST_PG_HA_DATA="$PG_HA_DIR/node1/data,$PG_HA_DIR/node2/data,$PG_HA_DIR/node3/data"
	# node1 first: it bootstraps the cluster; the others clone it.
	pg_ha_spawn "$PG_HA_DIR/node1.pid" "$PG_HA_DIR/node1/patroni.out" patroni "$PG_HA_DIR/node1.yml"
	for i in 2 3; do pg_ha_spawn "$PG_HA_DIR/node$i.pid" "$PG_HA_DIR/node$i/patroni.out" patroni "$PG_HA_DIR/node$i.yml"; done
	idem_on_exit pg_ha_stop
	if ! pg_ha_wait_ready 120; then
		echo "pg_ha_start: no leader accepting writes with a synchronous standby after 120 s; Patroni's logs:" >&2
		tail -n 30 "$PG_HA_DIR"/node*/patroni.out "$PG_HA_DIR"/node*/patroni.log >&2 2>/dev/null
		pg_ha_stop
		return 1
	fi
	echo "Patroni $(patroni --version | awk '{print $2}') cluster of 3 PostgreSQL nodes on 127.0.0.1:${PG_HA_PGPORTS[*]} (REST ${rest[*]}), etcd on :$PG_HA_ETCD_PORT, synchronous_mode (in $PG_HA_DIR, $IDEM_REMOVAL)"
}

# pg_ha_pids prints the pids in the cluster's pid files (and, with
# postmasters, in the nodes' postmaster.pid) that are alive.
pg_ha_pids() {
	local f pid
	for f in "$@"; do
		if [ -f "$f" ]; then
			pid=$(head -n 1 "$f")
			if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
		fi
	done
	return 0
}

# pg_ha_logs prints the end of every node's Patroni and PostgreSQL output,
# to see why a node did not come back (call it before pg_ha_stop).
pg_ha_logs() {
	[ -n "${PG_HA_DIR:-}" ] || return 0
	local f
	for f in "$PG_HA_DIR"/node?/patroni.out "$PG_HA_DIR"/node?/patroni.log; do
		if [ -f "$f" ]; then
			echo "== $f"
			tail -n "${1:-40}" "$f"
		fi
	done
	return 0
}

# pg_ha_agents prints the pids of the Patroni agents running one of the
# cluster's configs: those pg_ha_start started, and those the failover
# fault's fence restarted (not in the pid files).
pg_ha_agents() {
	local f pid
	pg_ha_pids "$PG_HA_DIR"/node?.pid
	for f in /proc/[0-9]*/cmdline; do
		if { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -q "patroni $PG_HA_DIR/node"; then
			pid=${f#/proc/}
			echo "${pid%/cmdline}"
		fi
	done
	return 0
}

pg_ha_stop() {
	[ -n "${PG_HA_DIR:-}" ] || return 0
	local pids i
	# Patroni first (it stops its PostgreSQL), then etcd, which it needs.
	# Every command may fail (a process already gone): written so that
	# set -e in the caller does not cut the cleanup short.
	pids=$(pg_ha_agents | sort -u)
	if [ -n "$pids" ]; then
		kill -CONT $pids 2>/dev/null || true
		kill -TERM $pids 2>/dev/null || true
	fi
	for i in $(seq 1 100); do
		[ -n "$(pg_ha_agents)" ] || break
		sleep 0.1
	done
	# A Patroni agent that did not stop, and a postmaster Patroni left
	# running (its agent killed by a fault).
	pids="$(pg_ha_agents) $(pg_ha_pids "$PG_HA_DIR"/node?/data/postmaster.pid)"
	if [ -n "${pids// /}" ]; then
		kill -CONT $pids 2>/dev/null || true
		kill -KILL $pids 2>/dev/null || true
	fi
	pids=$(pg_ha_pids "$PG_HA_DIR/etcd.pid")
	if [ -n "$pids" ]; then
		kill -TERM $pids 2>/dev/null || true
		for i in $(seq 1 50); do
			[ -n "$(pg_ha_pids "$PG_HA_DIR/etcd.pid")" ] || break
			sleep 0.1
		done
		pids=$(pg_ha_pids "$PG_HA_DIR/etcd.pid")
		if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null || true; fi
	fi
	rm -rf "$PG_HA_DIR"
	PG_HA_DIR=
	return 0
}
