#!/usr/bin/env bash
# Regenerates everything derived from the fencing API types in
# api/fencing/v1alpha1: the deepcopy functions next to them, the typed
# clientset, listers, informers and apply configurations in pkg/generated,
# and the CRD manifests in deploy/crds, copied into the Helm chart's crds/.
#
# Usage: hack/update-codegen.sh [ROOT]
#
# ROOT (default: this repository) is the module root to generate in; the
# drift test in test/codegen runs it on a copy. The generators are taken
# from TOOLS_BIN (default: ROOT/.cache/tools/bin, filled by
# `make generate-tools`).
set -euo pipefail

root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
tools=${TOOLS_BIN:-$root/.cache/tools/bin}
module=fenceline.io/fenceline
api=./api/fencing/v1alpha1
out=pkg/generated

cd "$root"
for tool in deepcopy-gen applyconfiguration-gen client-gen lister-gen informer-gen controller-gen; do
	if [[ ! -x $tools/$tool ]]; then
		echo "missing $tools/$tool: run \`make generate-tools\`" >&2
		exit 1
	fi
done

# Start from nothing, so that a removed type leaves no stale file behind.
rm -rf "$out/applyconfiguration" "$out/clientset" "$out/informers" "$out/listers" "$api/zz_generated.deepcopy.go" deploy/crds/fenceline.io_*.yaml \
	deploy/helm/fenceline/crds/fenceline.io_*.yaml

header=(--go-header-file /dev/null)
"$tools/deepcopy-gen" "${header[@]}" --output-file zz_generated.deepcopy.go "$api"
"$tools/applyconfiguration-gen" "${header[@]}" \
	--output-dir "$out/applyconfiguration" --output-pkg "$module/$out/applyconfiguration" "$api"
"$tools/client-gen" "${header[@]}" \
	--output-dir "$out/clientset" --output-pkg "$module/$out/clientset" --clientset-name versioned \
	--input-base "" --input "$module/api/fencing/v1alpha1" \
	--apply-configuration-package "$module/$out/applyconfiguration"
"$tools/lister-gen" "${header[@]}" \
	--output-dir "$out/listers" --output-pkg "$module/$out/listers" "$api"
"$tools/informer-gen" "${header[@]}" \
	--output-dir "$out/informers" --output-pkg "$module/$out/informers" \
	--versioned-clientset-package "$module/$out/clientset/versioned" \
	--listers-package "$module/$out/listers" "$api"
"$tools/controller-gen" crd paths="$api/..." output:crd:artifacts:config=deploy/crds
# The chart installs the same CRDs (Helm takes them from its crds/ as they
# are); test/helm fails on a difference.
mkdir -p deploy/helm/fenceline/crds
cp deploy/crds/fenceline.io_*.yaml deploy/helm/fenceline/crds/
