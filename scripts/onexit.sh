# scripts/onexit.sh: sourced by scripts/pg.sh, pgbouncer.sh, rabbitmq.sh and
# redis.sh. idem_on_exit STOP registers a server's stop function and sets
# IDEM_REMOVAL to who will call it, for the start line of that server (call it
# in the starting shell, not in a command substitution, so the trap holds).
#
# A shell that set an exit trap of its own before starting a server
# (scripts/test, ab-bench) keeps it and calls the stop functions itself. A
# shell with no exit trap (the examples' READMEs, sourced by hand) gets one
# that calls every registered stop function, the last started first, so a
# server started there is removed when that shell exits.

idem_on_exit() {
	local trap_now
	trap_now=$(trap -p EXIT)
	if [ -z "$trap_now" ] || [[ $trap_now == *idem_run_exit_stops* ]]; then
		IDEM_EXIT_STOPS="$1 ${IDEM_EXIT_STOPS:-}"
		trap idem_run_exit_stops EXIT
		IDEM_REMOVAL="removed when this shell exits, or by $1"
	else
		IDEM_REMOVAL="removed by $1, which this shell's exit trap calls"
	fi
}

idem_run_exit_stops() {
	local stop
	for stop in ${IDEM_EXIT_STOPS:-}; do "$stop"; done
	IDEM_EXIT_STOPS=
}
