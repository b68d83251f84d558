#!/usr/bin/env bash
# The single node's guard: the first process `kiln controlplane up --node`
# (the `ControlPlane` node option) starts, and the last to go. It
#
#   1. takes the machine's node lock (one node per machine: the bridge, the
#      kubelet's ports and the sysctls are global) and holds it while it lives;
#   2. tears down a node directory left by a run that was killed (teardown.sh);
#   3. prepares the node (prepare.sh: packages, bridge, configs, images);
#   4. runs containerd (Debian's, which has no lifeline) and imports the images;
#   5. writes NODE_DIR/ready, then waits. When it gets SIGTERM (not SIGINT),
#      or when the process named by KILN_LIFELINE is no longer its parent
#      (however that process died), it runs teardown.sh while containerd
#      still answers (kubelet, kube-proxy and kube-scheduler have pid files
#      there) and exits.
#
#   tests/controlplane/node/guard.sh NODE_DIR CP_DIR BIN_DIR [LOCK [WAIT_SECONDS]]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
node="${1:?usage: guard.sh NODE_DIR CP_DIR BIN_DIR [LOCK [WAIT_SECONDS]]}"
cp_dir="${2:?}"
bins="${3:?}"
lock="${4:-$node.lock}"
wait_s="${5:-0}"

exec 9>>"$lock"
if ! flock -n 9; then
  echo "guard: another kiln node runs on this machine (lock $lock is held); waiting ${wait_s}s for it to stop" >&2
  if ! flock -w "$wait_s" 9; then
    echo "guard: another kiln node runs on this machine (lock $lock is held); stop it first" >&2
    exit 1
  fi
fi
if [ -e "$node" ]; then
  echo "guard: $node was left by an earlier run; tearing it down first" >&2
  bash "$here/teardown.sh" "$node" >&2 9>&-
fi

done=0
finish() { # finish [STATUS]: tear down and exit (1 when start-up failed)
  [ "$done" = 1 ] && return
  done=1
  echo "guard: tearing the node down" >&2
  bash "$here/teardown.sh" "$node" >&2 9>&-
  exit "${1:-0}"
}
trap finish TERM HUP
# Ctrl-C in a terminal reaches the whole process group: kiln stops the node
# in order (agents first), and its SIGTERM, not the SIGINT, ends this guard.
trap '' INT

bash "$here/prepare.sh" "$node" "$cp_dir" "$bins" 9>&- || { echo "guard: prepare.sh failed" >&2; finish 1; }

sock="$node/containerd/containerd.sock"
# In a session of its own: no terminal signal reaches it before teardown.sh
# has stopped the pods' containers through it.
setsid containerd --config "$node/containerd/config.toml" > "$node/containerd/containerd.log" 2>&1 9>&- &
echo $! > "$node/containerd/containerd.pid"
for _ in $(seq 1 80); do [ -S "$sock" ] && break; sleep 0.25; done
if [ ! -S "$sock" ]; then
  echo "guard: containerd did not start; see $node/containerd/containerd.log" >&2
  tail -n 20 "$node/containerd/containerd.log" >&2
  finish 1
fi
for i in pause busybox httpd; do
  ctr --address "$sock" -n k8s.io images import --base-name "kiln.local/$i" "$node/images/$i.tar" >/dev/null 9>&- \
    || { echo "guard: importing $i failed" >&2; finish 1; }
done
echo "guard: containerd runs on $sock (images kiln.local/pause:3.10, kiln.local/busybox:1.35, kiln.local/httpd:1.35)" >&2
touch "$node/ready"

parent_gone() {
  [ -n "${KILN_LIFELINE:-}" ] || return 1
  local stat ppid
  stat="$(cat /proc/$$/stat 2>/dev/null)" || return 0
  ppid="$(echo "${stat##*) }" | cut -d' ' -f2)"
  [ "$ppid" != "$KILN_LIFELINE" ]
}
while :; do
  if parent_gone; then
    echo "guard: parent $KILN_LIFELINE is gone" >&2
    finish
  fi
  if ! kill -0 "$(cat "$node/containerd/containerd.pid" 2>/dev/null)" 2>/dev/null; then
    echo "guard: containerd exited; see $node/containerd/containerd.log" >&2
    finish 1
  fi
  sleep 1 &
  wait $! 2>/dev/null
done
