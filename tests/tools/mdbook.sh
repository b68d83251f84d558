#!/usr/bin/env bash
# Installs mdBook (MDBOOK_VERSION in versions.env) from crates.io into a cache
# directory outside the repository and prints the path of the binary. A cache
# hit costs nothing; parallel callers wait on one build.
#
#   tests/tools/mdbook.sh   # prints e.g. ~/.cache/kiln/tools/mdbook-0.5.4/bin/mdbook
#
# Honours KILN_TOOLS_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/kiln/tools).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
command -v cargo >/dev/null || { echo "mdbook.sh: cargo is required (https://rustup.rs)" >&2; exit 1; }

root="${KILN_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/tools}"
out="$root/mdbook-$MDBOOK_VERSION"
[ -x "$out/bin/mdbook" ] && { echo "$out/bin/mdbook"; exit 0; }

mkdir -p "$root"
exec 9>"$root/.mdbook.lock"
flock 9
[ -x "$out/bin/mdbook" ] && { echo "$out/bin/mdbook"; exit 0; }

echo "kiln tools: installing mdbook $MDBOOK_VERSION from crates.io into $out (first time only)" >&2
started=$SECONDS
# Its own target directory (a temporary one), not kiln's; no `serve`/`watch`.
env -u CARGO_TARGET_DIR cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION" \
  --no-default-features --features search --root "$out" >&2
echo "kiln tools: mdbook installed in $((SECONDS - started))s" >&2
echo "$out/bin/mdbook"
