#!/usr/bin/env bash
# Undoes everything the hand-run node of NODE.md leaves on the machine, in
# order, and says what it removed. Idempotent: running it twice is harmless.
#
#   tests/controlplane/node/teardown.sh /tmp/node
#
# The node directory holds pid files (kubelet/kubelet.pid, proxy/pid,
# sched/pid, containerd/containerd.pid), containerd's root and state, the CNI
# config and IPAM store, and sysctl.before (name=value lines saved before the
# kubelet started: it rewrites vm.overcommit_memory, kernel.panic and
# kernel.panic_on_oops; the bridge plugin and kube-proxy turn on ip_forward and
# route_localnet) and paths.before (which of the fixed host paths in step 8
# existed before the node started: only the others are removed).
set -uo pipefail
node="${1:?usage: teardown.sh NODE_DIR}"
node="$(cd "$node" 2>/dev/null && pwd)" || { echo "teardown: $1 is gone, nothing to do"; exit 0; }
bridge="${KILN_NODE_BRIDGE:-kiln0}"
# The guard runs this with KILN_LIFELINE set; kube-proxy --cleanup would
# follow it and exit at once (its parent is this script, not that process).
unset KILN_LIFELINE

stop() { # stop PIDFILE: SIGTERM, then SIGKILL after 10 s
  local f="$node/$1" pid
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "teardown: stopped $1 ($pid)"
  fi
  rm -f "$f"
}

# 1. Node agents first, so nothing recreates what follows.
stop kubelet/kubelet.pid
stop sched/pid
stop proxy/pid
# kube-proxy's chains and rules (KUBE-SERVICES, KUBE-SVC-*, KUBE-SEP-*, ...).
for b in "$node/bin/kube-proxy" "$(command -v kube-proxy 2>/dev/null)"; do
  [ -x "$b" ] && { "$b" --cleanup -v=0 >/dev/null 2>&1 && echo "teardown: kube-proxy --cleanup"; break; }
done

# 2. Containers: kill tasks and remove containers (and their snapshots) while
# containerd still runs, then stop it and any shim serving its socket.
sock="$node/containerd/containerd.sock"
if [ -S "$sock" ]; then
  for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$sock" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1
    sleep 0.5
    ctr --address "$sock" -n k8s.io tasks rm -f "$id" >/dev/null 2>&1
  done
  for id in $(ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do
    ctr --address "$sock" -n k8s.io containers rm "$id" >/dev/null 2>&1 && echo "teardown: removed container $id"
  done
fi
stop containerd/containerd.pid
for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null); do
  kill -KILL "$pid" && echo "teardown: killed shim $pid"
done

# 2b. Container processes containerd could not stop (it was gone, or a shim
# was killed first): every process left in the kubelet's pod cgroups.
left="$(find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods \( -name tasks -o -name cgroup.procs \) \
  -exec cat {} + 2>/dev/null | sort -un)"
for pid in $left; do
  kill -KILL "$pid" 2>/dev/null && echo "teardown: killed pod process $pid"
done
[ -n "$left" ] && sleep 0.5

# 3. Mounts under the node directory (overlay rootfs, sandbox shm, the
# kubelet's bind mount of its root dir), deepest first; then CRI's netns.
findmnt -rn -o TARGET | grep "^$node/" | sort -r | while read -r m; do
  umount "$m" 2>/dev/null || umount -l "$m"; echo "teardown: unmounted $m"
done
for ns in /var/run/netns/cni-*; do
  [ -e "$ns" ] || continue
  umount "$ns" 2>/dev/null; rm -f "$ns"; echo "teardown: removed netns $ns"
done

# 4. The CNI bridge (its veths went with the pods' namespaces).
if ip link show "$bridge" >/dev/null 2>&1; then
  ip link del "$bridge" && echo "teardown: deleted bridge $bridge"
fi

# 5. The kubelet's iptables chains (both families): KUBE-FIREWALL (jumped to
# from INPUT and OUTPUT), KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT; then any
# table left holding nothing but built-in chains with ACCEPT policies.
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  fam=ip; [ "$ipt" = ip6tables ] && fam=ip6
  for c in INPUT OUTPUT; do
    while "$ipt" -t filter -D "$c" -j KUBE-FIREWALL 2>/dev/null; do :; done
  done
  for t in filter nat mangle; do
    for c in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
      "$ipt" -t "$t" -F "$c" 2>/dev/null && "$ipt" -t "$t" -X "$c" 2>/dev/null && echo "teardown: $ipt -t $t -X $c"
    done
    if "$ipt" -t "$t" -S >/dev/null 2>&1 && ! "$ipt" -t "$t" -S | grep -qv '^-P [A-Z]* ACCEPT$'; then
      nft delete table "$fam" "$t" 2>/dev/null && echo "teardown: deleted empty nft table $fam $t"
    fi
  done
done

# 6. The kubelet's cgroups (cgroup v1: one tree per controller), leaves first.
for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$h" ] || continue
  find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  [ -d "$h" ] && echo "teardown: could not remove $h (processes left?)" || echo "teardown: removed $h"
done

# 7. Kernel settings back as they were.
if [ -f "$node/sysctl.before" ]; then
  while IFS='=' read -r k v; do
    [ -n "$k" ] && echo "$v" > "/proc/sys/$k" && echo "teardown: /proc/sys/$k = $v"
  done < "$node/sysctl.before"
fi

# 8. Fixed host paths that containerd 1.6, libcni and the kubelet use whatever
# their configuration says: shim sockets, runc root and fifos under
# /run/containerd, libcni's result cache, the kubelet's device-plugin socket
# (and its serving cert unless --cert-dir is given), the log symlink dir.
if [ -f "$node/paths.before" ]; then
  for p in /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /run/netns; do
    grep -qx "$p" "$node/paths.before" && continue
    [ -e "$p" ] || continue
    if [ "$p" = /run/containerd ] && pgrep -x containerd >/dev/null; then
      echo "teardown: another containerd runs, /run/containerd kept"; continue
    fi
    if [ "$p" = /run/netns ]; then rmdir "$p" 2>/dev/null && echo "teardown: removed $p"; continue; fi
    rm -rf "$p" && echo "teardown: removed $p"
  done
else
  echo "teardown: no $node/paths.before; check by hand: /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /run/netns"
fi

rm -rf "$node" && echo "teardown: removed $node"
