#!/usr/bin/env bash
# Assembles an OCI image of a kiln binary with no container engine and no
# registry: umoci writes an OCI image layout, and tar packs it into an archive
# that `ctr images import` (containerd), `podman load` or `skopeo copy
# oci-archive:...` take. `make image` runs it on the release binary.
#
#   deploy/image.sh BINARY OUT_DIR     # writes OUT_DIR/kiln-<version>.oci.tar
#
# The binary is glibc-linked (the Dockerfile's musl build needs a rustup
# target this machine cannot download), so the shared libraries `ldd` names
# go into the image at the same paths, with the dynamic loader. The image is
# named localhost/kiln:<Cargo.toml version>, as deploy/kustomization.yaml
# expects; it runs /kiln as 65532:65532 like the Dockerfile's distroless base.
set -euo pipefail
bin="${1:?usage: image.sh BINARY OUT_DIR}"
out="${2:?usage: image.sh BINARY OUT_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$here/../Cargo.toml" | head -n1)"
name=localhost/kiln

command -v umoci >/dev/null || { echo "image.sh: umoci is required (Debian: apt-get install umoci)" >&2; exit 1; }
[ -x "$bin" ] || { echo "image.sh: $bin is not an executable" >&2; exit 1; }
rootless=(); [ "$(id -u)" = 0 ] || rootless=(--rootless)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
layout="$work/layout"
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci unpack "${rootless[@]}" --image "$layout:$version" "$work/bundle"
root="$work/bundle/rootfs"

install -m 0755 "$bin" "$root/kiln"
# Shared libraries and the loader, at the paths the binary asks for.
if ldd "$bin" >/dev/null 2>&1; then
  ldd "$bin" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
fi
mkdir -p "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"

umoci repack "${rootless[@]}" --image "$layout:$version" "$work/bundle"
umoci config --image "$layout:$version" \
  --config.entrypoint /kiln --config.user 65532:65532 --config.workingdir / \
  --config.label "org.opencontainers.image.title=kiln" \
  --config.label "org.opencontainers.image.version=$version"
umoci gc --layout "$layout"

mkdir -p "$out"
archive="$out/kiln-$version.oci.tar"
tar -C "$layout" --sort=name --owner=0 --group=0 --numeric-owner -cf "$archive.tmp" .
mv "$archive.tmp" "$archive"
echo "image.sh: $archive ($(du -h "$archive" | cut -f1)); load it with:" >&2
echo "  ctr --address <the node's containerd socket> -n k8s.io images import --base-name $name $archive   # -> $name:$version" >&2
echo "$archive"
