#!/usr/bin/env bash
# Builds helm from its Go module (helm.sh/helm/v3/cmd/helm at HELM_VERSION in
# versions.env) into the control plane's cache directory and prints the path
# of the binary. A cache hit costs nothing; parallel callers wait on one build.
#
#   tests/tools/helm.sh    # prints e.g. ~/.cache/kiln/controlplane/helm-v3.21.4-1a2b3c4d/helm
#
# Honours KILN_CONTROLPLANE_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/kiln/controlplane).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
command -v go >/dev/null || { echo "helm.sh: Go 1.26+ is required to build helm (https://go.dev/dl)" >&2; exit 1; }

root="${KILN_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/controlplane}"
# The key covers this script, so a change of how helm is built rebuilds it.
key="$(cat "$here/helm.sh" "$here/versions.env" | sha256sum | cut -c1-8)"
out="$root/helm-$HELM_VERSION-$key"
[ -x "$out/helm" ] && { echo "$out/helm"; exit 0; }

mkdir -p "$root"
exec 9>"$root/.helm.lock"
flock 9
[ -x "$out/helm" ] && { echo "$out/helm"; exit 0; }

echo "kiln tools: building helm $HELM_VERSION from Go modules into $out (first time only)" >&2
staging="$(mktemp -d "$root/.helm.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
started=$SECONDS
# As helm's own Makefile links it: its version, and the Kubernetes version
# `helm template` and `helm lint` assume (from the client-go it is built with:
# v0.X.Y is Kubernetes 1.X).
gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
client_go="$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod")"
[ -n "$client_go" ] || { echo "helm.sh: no k8s.io/client-go in $gomod" >&2; exit 1; }
v=helm.sh/helm/v3/internal/version
ldflags="-s -w -X $v.version=$HELM_VERSION -X $v.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$client_go"
done
GOFLAGS="-buildvcs=false" GOBIN="$staging" go install -trimpath -ldflags "$ldflags" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
"$staging/helm" version --short >&2
rm -rf "$out"
mv "$staging" "$out"
trap - EXIT
echo "kiln tools: helm built in $((SECONDS - started))s" >&2
echo "$out/helm"
