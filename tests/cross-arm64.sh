#!/usr/bin/env bash
# tests/cross-arm64.sh - cross-build bramble for arm64 (aarch64-linux-gnu) into
# build-arm64/, installing what is missing first:
#   1. `dpkg --add-architecture arm64` (once), `apt-get update`, then the cross
#      compiler gcc-aarch64-linux-gnu, qemu-user (to run the result here) and the
#      :arm64 -dev packages (they pull the :arm64 runtime libraries into
#      /usr/lib/aarch64-linux-gnu, which qemu-aarch64 finds with QEMU_LD_PREFIX=/);
#      nothing is installed (no network, no root needed) when all is there;
#   2. cmake -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake, Release, no tests;
#   3. builds bramble-agent, bramble and brambled and checks with `file` that they
#      are ARM aarch64 executables.
# Idempotent: run it again and it only rebuilds what changed.
#
# Exit status 0 with a line "SKIP: <reason>" when the packages cannot be installed
# (no network, apt refuses, not root and no sudo, not a Debian system); non-zero
# when the packages are there but the build fails.
#
# Environment: BUILD_DIR (default build-arm64), JOBS (default nproc).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-arm64}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
TRIPLET=aarch64-linux-gnu

skip() {
    echo "SKIP: $*"
    exit 0
}

CROSS_DEPS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user cmake pkg-config file
            libzmq3-dev:arm64 libsodium-dev:arm64 libsqlite3-dev:arm64
            libyaml-dev:arm64 libjansson-dev:arm64 libncurses-dev:arm64)

installed() {
    local status
    status=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
    [ "$status" = "installed" ]
}

# ---- 1. packages
if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    skip "arm64 cross build: not a Debian system (no dpkg/apt-get); install an" \
         "aarch64-linux-gnu cross compiler and arm64 libraries by hand"
fi
missing=()
for pkg in "${CROSS_DEPS[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            SUDO=(sudo -n)
        else
            skip "arm64 cross build: packages missing (${missing[*]}) and not root" \
                 "(no password-less sudo) to install them"
        fi
    fi
    APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q
         -o Acquire::Retries=2 -o Acquire::http::Timeout=30)
    echo "cross-arm64: installing ${missing[*]}" >&2
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        "${SUDO[@]}" dpkg --add-architecture arm64 ||
            skip "arm64 cross build: dpkg --add-architecture arm64 failed"
    fi
    # a failed update (one index missing, mirror in sync) may still leave enough
    # to install from: only a failed install is a reason to skip
    "${APT[@]}" update ||
        echo "cross-arm64: apt-get update failed; trying the install anyway" >&2
    "${APT[@]}" install -y --no-install-recommends "${missing[@]}" ||
        skip "arm64 cross build: apt-get could not install ${missing[*]}" \
             "(no network, or the arm64 packages conflict with the installed" \
             "amd64 versions: multiarch needs the same version for both)"
fi
for tool in "$TRIPLET-gcc" qemu-aarch64 cmake file; do
    command -v "$tool" >/dev/null 2>&1 ||
        skip "arm64 cross build: $tool not found after installing the packages"
done

# ---- 2. configure
mkdir -p "$BUILD_DIR"
echo "cross-arm64: configuring $BUILD_DIR" >&2
if ! cmake -S . -B "$BUILD_DIR" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/$TRIPLET.cmake" \
        -DBRAMBLE_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >"$BUILD_DIR/configure.log" 2>&1; then
    cat "$BUILD_DIR/configure.log" >&2
    echo "cross-arm64: configure failed (log: $BUILD_DIR/configure.log)" >&2
    exit 1
fi

# ---- 3. build and check
cmake --build "$BUILD_DIR" -j "$JOBS" --target bramble-agent bramble brambled
for b in bramble-agent bramble brambled; do
    desc=$(file -b "$BUILD_DIR/bin/$b")
    echo "$BUILD_DIR/bin/$b: $desc"
    case "$desc" in
        *"ARM aarch64"*) ;;
        *) echo "cross-arm64: $BUILD_DIR/bin/$b is not an aarch64 binary" >&2; exit 1 ;;
    esac
done
# a smoke run under qemu: the arm64 runtime libraries are in /usr/lib/$TRIPLET
if QEMU_LD_PREFIX=/ qemu-aarch64 "$BUILD_DIR/bin/bramble-agent" --version >/dev/null 2>&1 ||
        QEMU_LD_PREFIX=/ qemu-aarch64 "$BUILD_DIR/bin/bramble-agent" --help >/dev/null 2>&1; then
    echo "cross-arm64: $BUILD_DIR/bin/bramble-agent runs under qemu-aarch64"
else
    echo "cross-arm64: note: $BUILD_DIR/bin/bramble-agent --version/--help did not exit 0" \
         "under qemu-aarch64 (QEMU_LD_PREFIX=/)" >&2
fi
echo "cross-arm64: ok"
