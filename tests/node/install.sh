#!/usr/bin/env bash
# Sets up the official `openai` npm client for the bramble-gateway tests.
#
#   tests/node/install.sh DEST          (e.g. tests/node/install.sh build-test/npm)
#
# Installs the `openai` package from the npm registry into DEST/node_modules
# (only when DEST/node_modules/openai is missing), then copies openai_call.mjs
# into DEST (every run, so it stays current). Run the client as
#
#   node DEST/openai_call.mjs --base-url URL --api-key KEY --model M ...
#
# Why a copy: the client is an ES module, and ESM `import "openai"` ignores
# NODE_PATH; it resolves from node_modules folders above the importing file's
# real path. A symlink would not do either (node follows it back to tests/node/),
# so the file itself has to live in DEST, next to DEST/node_modules.
#
# Version: the current major of `openai` is 7 (npm view openai version: 7.60.0),
# which needs node >= 22; on an older node the script takes the newest 6.x.
# OPENAI_NPM_SPEC=openai@... overrides the choice.
#
# Exits non-zero with a message when node or npm is missing or the install fails.
set -euo pipefail

die() { echo "install.sh: $*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || die "usage: $0 DEST"
DEST=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

command -v node >/dev/null 2>&1 || die "node is not installed (need node >= 18 and npm)"
command -v npm >/dev/null 2>&1 || die "npm is not installed (need node >= 18 and npm)"

NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]') || die "cannot run node"
[ "$NODE_MAJOR" -ge 18 ] || die "node $(node --version) is too old (need >= 18)"

if [ -n "${OPENAI_NPM_SPEC:-}" ]; then
    SPEC=$OPENAI_NPM_SPEC
elif [ "$NODE_MAJOR" -ge 22 ]; then
    SPEC='openai@^7'
else
    SPEC='openai@^6'
fi

mkdir -p "$DEST" || die "cannot create $DEST"
ABS=$(cd "$DEST" && pwd)
version() { node -p 'require(process.argv[1]).version' "$ABS/node_modules/openai/package.json" 2>/dev/null || echo '?'; }

if [ -d "$DEST/node_modules/openai" ]; then
    echo "install.sh: openai $(version) already in $DEST/node_modules, not installing"
else
    echo "install.sh: installing $SPEC into $DEST (node $(node --version), npm $(npm --version))"
    npm install --prefix "$DEST" --no-audit --no-fund "$SPEC" \
        || die "npm install $SPEC into $DEST failed (is the npm registry reachable?)"
    [ -d "$DEST/node_modules/openai" ] || die "npm install ran but $DEST/node_modules/openai is missing"
    echo "install.sh: installed openai $(version) into $DEST/node_modules"
fi

cp "$HERE/openai_call.mjs" "$DEST/openai_call.mjs" || die "cannot copy openai_call.mjs into $DEST"
echo "install.sh: copied openai_call.mjs to $DEST/openai_call.mjs (run: node $DEST/openai_call.mjs ...)"
