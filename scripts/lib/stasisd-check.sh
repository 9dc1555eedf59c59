# Shell functions of the package checks (scripts/check-deb.sh,
# scripts/check-images.sh), which start a packaged stasisd and drive it
# with its own stasis. Each function runs the caller's `stasis` (a function
# or the installed binary) and, on a failure, prints what stasisd logged,
# names the check (CHECK) and exits 1.

# stasisd_serving PID LOG SOCKET waits until stasisd (process PID, logging
# to LOG) answers on SOCKET, and checks that it runs the packaged runsc.
stasisd_serving() {
	local pid=$1 log=$2 socket=$3
	for _ in $(seq 300); do
		stasis actor ps --socket "$socket" --json >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || { echo "$CHECK: stasisd exited before serving:" >&2; cat "$log" >&2; exit 1; }
		sleep 0.1
	done
	echo "API answers on $socket: actors $(stasis actor ps --socket "$socket" --json)"
	grep -q "\"msg\":\"stasisd serving\".*\"runsc\":\"/usr/lib/stasis/bin/runsc\"" "$log" || { echo "$CHECK: stasisd does not run the packaged runsc:" >&2; cat "$log" >&2; exit 1; }
}

# demo_keeps_state LOG REPORT DEMO-ARGS... runs `stasis demo --json
# DEMO-ARGS...` into REPORT: a demo actor suspended and resumed must keep
# its state.
demo_keeps_state() {
	local log=$1 report=$2
	shift 2
	if ! stasis demo --json "$@" >"$report" 2>"$report.err"; then
		echo "$CHECK: the demo failed:" >&2
		tail -5 "$report.err" >&2
		echo "stasisd said:" >&2
		tail -20 "$log" >&2
		exit 1
	fi
	tr -d " \n" <"$report" | grep -q "\"statePreserved\":true" || { echo "$CHECK: the demo actor lost its state:" >&2; cat "$report" >&2; exit 1; }
	echo "demo actor suspended and resumed with its state: $(tr -d " \n" <"$report")"
}

# stasisd_stops PID LOG stops stasisd with SIGTERM, as systemd and the
# kubelet stop it: it must exit cleanly and say so.
stasisd_stops() {
	local pid=$1 log=$2
	kill -TERM "$pid"
	if ! wait "$pid"; then
		echo "$CHECK: stasisd did not exit cleanly on SIGTERM:" >&2
		tail -20 "$log" >&2
		exit 1
	fi
	grep -q "stasisd stopped" "$log" || { echo "$CHECK: stasisd exited without saying it stopped:" >&2; tail -20 "$log" >&2; exit 1; }
	echo "stasisd stopped on SIGTERM"
}
