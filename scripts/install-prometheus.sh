#!/usr/bin/env bash
# Installs Prometheus and promtool from Debian's package at a pinned
# version: scripts/test.sh checks and unit-tests the alert rules with
# promtool (deploy/prometheus), and integration
# TestDashboardAndAlertsOnARealPrometheus runs the dashboard's queries and
# the rules on a real Prometheus scraping a real stasisd. Idempotent.
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-2.42.0+ds-5+deb12u1}"

if [[ "$(dpkg-query -W -f='${Status} ${Version}' prometheus 2>/dev/null)" == "install ok installed $PROMETHEUS_VERSION" ]]; then
	echo "prometheus $PROMETHEUS_VERSION already installed"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "install-prometheus: installing a Debian package needs root (run with sudo)" >&2
	exit 1
fi
apt-get update -qq
echo "installing prometheus $PROMETHEUS_VERSION"
# The package's own service is not wanted: the tests run their own.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "prometheus=$PROMETHEUS_VERSION" >/dev/null
if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
	systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
