#!/usr/bin/env bash
# Starts the single node of NODE.md against a running local control plane:
# containerd (Debian's, on a private socket), the pause and busybox images
# built here, kubelet, kube-scheduler and kube-proxy. The hand-run steps of
# NODE.md as one script, the base for a `ControlPlane` node option. As root.
#
#   tests/controlplane/node/up.sh NODE_DIR CP_DIR    # CP_DIR from `kiln controlplane up --dir`
#   ...                                              # pods: image kiln.local/busybox:1.35
#   tests/controlplane/node/teardown.sh NODE_DIR     # undoes all of it
#
# Binaries come from build.sh (or KILN_CONTROLPLANE_BIN_DIR). Missing Debian
# packages are installed with apt-get. Every wait is bounded.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
node="${1:?usage: up.sh NODE_DIR CP_DIR}"
cp_dir="$(cd "${2:?usage: up.sh NODE_DIR CP_DIR}" && pwd)"
[ "$(id -u)" = 0 ] || { echo "up.sh: the node needs root (containerd, CNI, cgroups)" >&2; exit 1; }
mkdir -p "$node"
node="$(cd "$node" && pwd)"
bins="${KILN_CONTROLPLANE_BIN_DIR:-$(bash "$here/../build.sh" --node)}"
kubeconfig="$cp_dir/kubeconfig"
kubectl=("$bins/kubectl" --kubeconfig "$kubeconfig")
name=kiln-node

# 0. Debian packages, only those missing.
need=()
for pair in containerd:containerd runc:runc umoci:umoci iptables:iptables /usr/lib/cni/bridge:containernetworking-plugins /bin/busybox:busybox-static; do
  what="${pair%%:*}" pkg="${pair#*:}"
  if [[ "$what" == /* ]]; then [ -e "$what" ] || need+=("$pkg"); else command -v "$what" >/dev/null || need+=("$pkg"); fi
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "up.sh: installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# 1. What teardown.sh must restore or leave alone, recorded before anything runs.
for p in /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /run/netns; do
  [ -e "$p" ] && echo "$p"
done > "$node/paths.before"
for s in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops net/ipv4/ip_forward net/ipv4/conf/all/route_localnet; do
  echo "$s=$(cat "/proc/sys/$s")"
done > "$node/sysctl.before"
mkdir -p "$node/bin" "$node/containerd" "$node/cni/net.d" "$node/kubelet" "$node/sched" "$node/proxy" "$node/images"
cp "$bins/kube-proxy" "$node/bin/"     # teardown.sh runs its --cleanup

# 2. Images: our pause binary and busybox-static, as OCI layouts (umoci).
(cd "$here/pause" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$node/bin/pause" .)
image() { # image NAME TAG FILE... : a one-layer image of FILEs in /bin, then config
  local layout="$node/images/$1" tag="$2"; shift 2
  rm -rf "$layout" "$layout.bundle"
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci unpack --image "$layout:$tag" "$layout.bundle"
  mkdir -p "$layout.bundle/rootfs/bin"
  cp "$@" "$layout.bundle/rootfs/bin/"
}
image pause 3.10 "$node/bin/pause"
umoci repack --image "$node/images/pause:3.10" "$node/images/pause.bundle"
umoci config --image "$node/images/pause:3.10" --config.entrypoint /bin/pause --config.user 65535:65535
image busybox 1.35 /bin/busybox
for a in sh sleep echo cat ls wget nc; do ln -s busybox "$node/images/busybox.bundle/rootfs/bin/$a"; done
umoci repack --image "$node/images/busybox:1.35" "$node/images/busybox.bundle"
umoci config --image "$node/images/busybox:1.35" --config.cmd /bin/sh --config.env PATH=/bin
for i in pause busybox; do
  umoci gc --layout "$node/images/$i"
  rm -rf "$node/images/$i.bundle"
  tar -C "$node/images/$i" -cf "$node/images/$i.tar" .
done

# 3. The bridge, before anything binds its address (the kubelet serves on it;
# CNI's bridge plugin reuses it), then containerd on its own socket, root and state.
if ! ip link show kiln0 >/dev/null 2>&1; then
  ip link add kiln0 type bridge && ip addr add 10.244.0.1/24 dev kiln0 && ip link set kiln0 up
fi
sed "s#@NODE_DIR@#$node#g" "$here/containerd.toml" > "$node/containerd/config.toml"
sed "s#@NODE_DIR@#$node#g" "$here/10-kiln.conflist" > "$node/cni/net.d/10-kiln.conflist"
setsid containerd --config "$node/containerd/config.toml" > "$node/containerd/containerd.log" 2>&1 &
echo $! > "$node/containerd/containerd.pid"
sock="$node/containerd/containerd.sock"
for _ in $(seq 1 40); do [ -S "$sock" ] && break; sleep 0.25; done
[ -S "$sock" ] || { echo "up.sh: containerd did not start; see $node/containerd/containerd.log" >&2; exit 1; }
ctr --address "$sock" -n k8s.io images import --base-name kiln.local/pause "$node/images/pause.tar" >/dev/null
ctr --address "$sock" -n k8s.io images import --base-name kiln.local/busybox "$node/images/busybox.tar" >/dev/null

# 4. kubelet.
sed "s#@NODE_DIR@#$node#g; s#@CP_DIR@#$cp_dir#g" "$here/kubelet.yaml" > "$node/kubelet/config.yaml"
setsid "$bins/kubelet" --config="$node/kubelet/config.yaml" --kubeconfig="$kubeconfig" \
  --root-dir="$node/kubelet/root" --cert-dir="$node/kubelet/pki" --hostname-override=$name --node-ip=10.244.0.1 \
  > "$node/kubelet/kubelet.log" 2>&1 &
echo $! > "$node/kubelet/kubelet.pid"

# 5. kube-scheduler and kube-proxy.
setsid "$bins/kube-scheduler" --kubeconfig="$kubeconfig" --leader-elect=false --secure-port=0 \
  > "$node/sched/sched.log" 2>&1 &
echo $! > "$node/sched/pid"
cat > "$node/proxy/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $kubeconfig}
hostnameOverride: $name
clusterCIDR: 10.244.0.0/24
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0}
EOF
setsid "$bins/kube-proxy" --config="$node/proxy/config.yaml" > "$node/proxy/proxy.log" 2>&1 &
echo $! > "$node/proxy/pid"

# 6. Ready within 60 s; then take off the not-ready taint that only the
# (not yet enabled) nodelifecycle controller would remove.
for _ in $(seq 1 60); do
  ready="$("${kubectl[@]}" get node $name -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)"
  [ "$ready" = True ] && break
  sleep 1
done
[ "$ready" = True ] || { echo "up.sh: node $name not Ready after 60 s; see $node/kubelet/kubelet.log" >&2; exit 1; }
"${kubectl[@]}" taint node $name node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
echo "up.sh: node $name Ready (images kiln.local/pause:3.10, kiln.local/busybox:1.35); CONTAINERD_ADDRESS=$sock" >&2
