#!/usr/bin/env bash
# Generates the Kubernetes API's deep-copy functions and CRDs from
# kube/api/v1alpha1 with controller-gen at a pinned version; run it after
# changing the types, and commit what it writes.
set -euo pipefail
cd "$(dirname "$0")/.."
CONTROLLER_GEN="sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION:-v0.23.0}"
go run "$CONTROLLER_GEN" object paths=./kube/api/...
go run "$CONTROLLER_GEN" crd paths=./kube/api/... output:crd:dir=deploy/kube/crds
