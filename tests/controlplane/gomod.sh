#!/usr/bin/env bash
# Regenerates the wrapper modules' go.mod/go.sum for the versions in versions.env.
#
# k8s.io/kubernetes requires every staging module at v0.0.0 and satisfies them
# with `replace ... => ./staging/src/k8s.io/...`, which Go ignores in a
# dependency. So the kube wrapper pins each staging module to the matching
# v0.X.Y. The list changes between releases, so it is derived from the
# release's own go.mod rather than written by hand.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
command -v go >/dev/null || { echo "gomod.sh: Go is required (https://go.dev/dl)" >&2; exit 1; }

staging_version="v0.${K8S_VERSION#v1.}"
kmod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$kmod")
[ "${#staging[@]}" -gt 0 ] || { echo "gomod.sh: no staging modules found in $kmod" >&2; exit 1; }

{
  echo "module kiln.dev/controlplane/kube"
  echo
  echo "go $(sed -n 's/^go \(.*\)/\1/p' "$kmod")"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes ${K8S_VERSION}"
  echo "	kiln.dev/controlplane/lifeline v0.0.0"
  echo ")"
  echo
  echo "replace ("
  echo "	kiln.dev/controlplane/lifeline => ../lifeline"
  for m in "${staging[@]}"; do echo "	$m => $m $staging_version"; done
  echo ")"
} > "$here/kube/go.mod"
(cd "$here/kube" && go mod tidy)

cat > "$here/etcd/go.mod" <<MOD
module kiln.dev/controlplane/etcd

go 1.25

require (
	go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
	kiln.dev/controlplane/lifeline v0.0.0
)

replace kiln.dev/controlplane/lifeline => ../lifeline
MOD
(cd "$here/etcd" && go mod tidy)
echo "gomod.sh: kube (${#staging[@]} staging modules at $staging_version) and etcd modules regenerated"
