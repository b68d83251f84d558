#!/usr/bin/env bash
# Prepares the single node of NODE.md, before any of its processes start:
# Debian packages (installed with apt-get when missing and root), what
# teardown.sh must restore (paths.before, sysctl.before), the bridge kiln0 with
# 10.244.0.1 (before the apiserver, which binds that address), the configs of
# containerd, CNI, kubelet and kube-proxy, and the pause, busybox and httpd
# images as OCI archives. guard.sh runs it under the node lock; it starts
# nothing. As root.
#
#   tests/controlplane/node/prepare.sh NODE_DIR CP_DIR BIN_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
node="${1:?usage: prepare.sh NODE_DIR CP_DIR BIN_DIR}"
cp_dir="${2:?usage: prepare.sh NODE_DIR CP_DIR BIN_DIR}"
bins="${3:?usage: prepare.sh NODE_DIR CP_DIR BIN_DIR}"
name=kiln-node
[ "$(id -u)" = 0 ] || { echo "prepare.sh: the node needs root (containerd, CNI, cgroups, iptables)" >&2; exit 1; }

# 0. Debian packages, only those missing.
need=()
for pair in containerd:containerd runc:runc umoci:umoci iptables:iptables /usr/lib/cni/bridge:containernetworking-plugins /bin/busybox:busybox-static; do
  what="${pair%%:*}" pkg="${pair#*:}"
  if [[ "$what" == /* ]]; then [ -e "$what" ] || need+=("$pkg"); else command -v "$what" >/dev/null || need+=("$pkg"); fi
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "prepare.sh: installing the missing Debian packages: ${need[*]}" >&2
  if ! command -v apt-get >/dev/null; then
    echo "prepare.sh: no apt-get here; install ${need[*]} (Debian package names) by hand" >&2; exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "prepare.sh: Go is needed to build the pause binary" >&2; exit 1; }

# 1. What teardown.sh must restore or leave alone, recorded before anything runs.
mkdir -p "$node"
for p in /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /run/netns; do
  [ -e "$p" ] && echo "$p"
done > "$node/paths.before"
for s in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops net/ipv4/ip_forward net/ipv4/conf/all/route_localnet; do
  echo "$s=$(cat "/proc/sys/$s")"
done > "$node/sysctl.before"
mkdir -p "$node/bin" "$node/containerd" "$node/cni/net.d" "$node/kubelet" "$node/sched" "$node/proxy" "$node/images"
cp "$bins/kube-proxy" "$node/bin/"     # teardown.sh runs its --cleanup

# 2. The bridge, before anything binds its address (the apiserver and the
# kubelet serve on it; CNI's bridge plugin reuses it).
if ! ip link show kiln0 >/dev/null 2>&1; then
  ip link add kiln0 type bridge && ip addr add 10.244.0.1/24 dev kiln0 && ip link set kiln0 up
fi

# 3. Configs.
sed "s#@NODE_DIR@#$node#g" "$here/containerd.toml" > "$node/containerd/config.toml"
sed "s#@NODE_DIR@#$node#g" "$here/10-kiln.conflist" > "$node/cni/net.d/10-kiln.conflist"
sed "s#@NODE_DIR@#$node#g; s#@CP_DIR@#$cp_dir#g" "$here/kubelet.yaml" > "$node/kubelet/config.yaml"
cat > "$node/proxy/config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $cp_dir/kubeconfig}
hostnameOverride: $name
clusterCIDR: 10.244.0.0/24
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0}
YAML

# 4. Images, as OCI archives (umoci): our pause binary; busybox-static; and
# busybox's httpd serving one page (the demo's web server).
(cd "$here/pause" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$node/bin/pause" .)
image() { # image NAME TAG FILE... : a one-layer image of FILEs in /bin, unpacked for more
  local layout="$node/images/$1" tag="$2"; shift 2
  rm -rf "$layout" "$layout.bundle"
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci unpack --image "$layout:$tag" "$layout.bundle"
  mkdir -p "$layout.bundle/rootfs/bin"
  cp "$@" "$layout.bundle/rootfs/bin/"
}
pack() { # pack NAME TAG: repack the bundle, drop it, archive the layout
  umoci repack --image "$node/images/$1:$2" "$node/images/$1.bundle"
  rm -rf "$node/images/$1.bundle"
}
archive() {
  umoci gc --layout "$node/images/$1"
  tar -C "$node/images/$1" -cf "$node/images/$1.tar" .
  rm -rf "${node:?}/images/$1"
}
image pause 3.10 "$node/bin/pause"
pack pause 3.10
umoci config --image "$node/images/pause:3.10" --config.entrypoint /bin/pause --config.user 65535:65535
archive pause
for i in busybox httpd; do
  image $i 1.35 /bin/busybox
  for a in sh sleep echo cat ls wget nc httpd; do ln -s busybox "$node/images/$i.bundle/rootfs/bin/$a"; done
done
mkdir -p "$node/images/httpd.bundle/rootfs/www"
cat > "$node/images/httpd.bundle/rootfs/www/index.html" <<'HTML'
<!doctype html><title>kiln demo</title><p>Served by busybox httpd (Debian busybox-static) in kiln's local demo image kiln.local/httpd.</p>
HTML
pack busybox 1.35
umoci config --image "$node/images/busybox:1.35" --config.cmd /bin/sh --config.env PATH=/bin
archive busybox
pack httpd 1.35
umoci config --image "$node/images/httpd:1.35" --config.entrypoint /bin/httpd \
  --config.cmd -f --config.cmd -p --config.cmd 8080 --config.cmd -h --config.cmd /www \
  --config.env PATH=/bin --config.user 65532:65532 --config.exposedports 8080/tcp
archive httpd
echo "prepare.sh: $node ready (bridge kiln0, images pause, busybox, httpd)" >&2
