#!/usr/bin/env bash
# The Debian package's check (run by scripts/test.sh): builds the package,
# installs it with dpkg, checks the installed systemd unit with
# systemd-analyze verify, starts stasisd with the unit's ExecStart command
# line (these machines run no systemd), and through the
# installed stasis checks that the API answers and that a demo actor, in a
# sandbox of the packaged runsc, is suspended and resumed. stasisd is then
# stopped with SIGTERM, as systemd stops it, and must exit cleanly.
#
# The daemon runs in a private mount namespace with empty /run/stasis and
# /var/lib/stasis, so that a stasisd already serving on this machine (the
# quick start's) is neither seen nor touched. A package that was not
# installed before is purged afterwards. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "scripts/check-deb.sh: dpkg -i needs root (run with sudo)" >&2; exit 1; }

deb=$(scripts/build-deb.sh | tail -1)
was_installed=$(dpkg-query -W -f='${Status}' stasis 2>/dev/null || true)
work=$(mktemp -d)
cleanup() {
	if [[ "$was_installed" != "install ok installed" ]]; then
		dpkg --purge stasis >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "== dpkg -i $deb"
dpkg -i "$deb"
[[ "$(dpkg-query -W -f='${Status}' stasis)" == "install ok installed" ]] || { echo "check-deb: dpkg does not list stasis as installed" >&2; exit 1; }
/usr/bin/stasis --version
/usr/bin/stasisd --version
/usr/bin/stasis-cuda --version 2>&1 | sed -n 1p
# The guest agent is a micro-VM's /init: initramfs refuses it unless static.
/usr/bin/stasis-agent initramfs -o "$work/initramfs.gz"
echo "stasis-agent writes an initramfs ($(stat -c %s "$work/initramfs.gz") bytes)"
runsc_version=$(cat /usr/lib/stasis/share/stasis/runsc.version)
echo "packaged runsc $runsc_version"

unit=/usr/lib/systemd/system/stasisd.service
# systemd's own check of the unit (directives, the ExecStart binary).
if ! command -v systemd-analyze >/dev/null; then
	apt-get update -qq && apt-get install -y -qq systemd >/dev/null
fi
echo "== systemd-analyze verify $unit"
systemd-analyze verify "$unit"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[[ -n "$exec_start" ]] || { echo "check-deb: $unit has no ExecStart" >&2; exit 1; }
echo "== the unit's command line: $exec_start"

# The rest runs in the private mount namespace; the variables go in as
# arguments.
mkdir -p /run/stasis /var/lib/stasis
unshare --mount --propagation private bash -euo pipefail -c '
	exec_start=$1 log=$2/stasisd.log
	source "$3"
	CHECK=check-deb
	stasis() { /usr/bin/stasis "$@"; }
	# What the unit'"'"'s RuntimeDirectory= and StateDirectory= make.
	mount -t tmpfs -o mode=0755 stasis-run /run/stasis
	mount -t tmpfs -o mode=0700 stasis-state /var/lib/stasis
	read -ra cmdline <<<"$exec_start"
	"${cmdline[@]}" 2>"$log" &
	daemon=$!
	# On a failure stasisd goes with the check (after a clean stop there
	# is nothing left to kill).
	trap "kill $daemon 2>/dev/null || true" EXIT
	socket=/run/stasis/stasisd.sock
	stasisd_serving "$daemon" "$log" "$socket"
	demo_keeps_state "$log" "$2/demo.json" --socket "$socket"
	stasisd_stops "$daemon" "$log"
' check-deb "$exec_start" "$work" "$PWD/scripts/lib/stasisd-check.sh"
echo "== the package installs and its unit serves the API"
