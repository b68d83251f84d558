#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and kubectl from their Go
# modules into a cache directory outside the repository and prints that
# directory. A cache hit costs nothing; the key covers the versions and the
# wrapper sources, so editing a wrapper rebuilds. With --node it also builds
# what the single node of NODE.md runs: kube-scheduler, kubelet, kube-proxy
# (about 10 more minutes cold on 2 cores; under a minute once the control
# plane's packages are in Go's build cache).
#
#   tests/controlplane/build.sh            # prints e.g. ~/.cache/kiln/controlplane/v1.36.3-v3.6.16-1a2b3c4d
#   tests/controlplane/build.sh --node     # the same directory, with the node's binaries too
#
# Honours KILN_CONTROLPLANE_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/kiln/controlplane).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

if ! command -v go >/dev/null; then
  echo "kiln controlplane: the Go toolchain is required to build kube-apiserver and etcd from source;" >&2
  echo "install Go 1.26 or newer (https://go.dev/dl) and make sure 'go' is on PATH" >&2
  exit 1
fi

sources_hash="$(cd "$here" && find versions.env build.sh lifeline kube etcd -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name '*.env' -o -name '*.sh' \) -print0 \
  | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-8)"
root="${KILN_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/controlplane}"
out="$root/${K8S_VERSION}-${ETCD_VERSION}-${sources_hash}"
bins=(etcd kube-apiserver kube-controller-manager kubectl)
case "${1:-}" in
  "") ;;
  --node) bins+=(kube-scheduler kubelet kube-proxy) ;;
  *) echo "usage: build.sh [--node]" >&2; exit 2 ;;
esac

complete() { for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if complete; then echo "$out"; exit 0; fi

mkdir -p "$root"
exec 9>"$root/.build.lock"
flock 9                      # parallel test binaries wait for one build
if complete; then echo "$out"; exit 0; fi

staging="$(mktemp -d "$root/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
export GOFLAGS="-buildvcs=false -mod=readonly"
started=$SECONDS

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "kiln controlplane: building kubernetes $K8S_VERSION and etcd $ETCD_VERSION into $out (first time only; 10-15 minutes cold on 2 cores)" >&2
# One binary at a time, each announced: a cold build is long, and says where it is.
i=0
for b in "${bins[@]}"; do
  i=$((i + 1))
  echo "kiln controlplane: [$i/${#bins[@]}] $b (after $((SECONDS - started))s)" >&2
  if [ "$b" = etcd ]; then
    (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$staging/etcd" .)
  else
    (cd "$here/kube" && go build -trimpath -ldflags "$ldflags" -o "$staging/$b" "./cmd/$b")
  fi
done
"$staging/kube-apiserver" --version >&2

if [ -d "$out" ]; then
  # --node after a plain build: others may be running binaries from $out, so
  # add files one by one (each mv is atomic) instead of replacing the directory.
  for f in "$staging"/*; do mv -f "$f" "$out/"; done
  rm -rf "$staging"
else
  mv "$staging" "$out"
fi
trap - EXIT
echo "kiln controlplane: built in $((SECONDS - started))s" >&2
echo "$out"
