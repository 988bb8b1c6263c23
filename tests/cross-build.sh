#!/usr/bin/env bash
# tests/cross-build.sh ARCH [BUILD_DIR] - cross-build bramble for a Raspberry Pi
# with Debian's cross compilers, installing what is missing first.
#   ARCH       arm64 (aarch64-linux-gnu, 64-bit Raspberry Pi OS) or
#              armhf (arm-linux-gnueabihf, 32-bit Raspberry Pi OS)
#   BUILD_DIR  default $BUILD_DIR, else build-ARCH (relative to the repository)
#
#   1. host packages: the cross compiler gcc-<triplet>, libc6-dev-<arch>-cross,
#      qemu-user (to run the result here), cmake, pkg-config, file;
#   2. the target's libraries, in one of two ways:
#      multiarch  `dpkg --add-architecture ARCH`, `apt-get update`, the :ARCH -dev
#                 packages (they pull the :ARCH runtime libraries into
#                 /usr/lib/<triplet>; qemu finds them with QEMU_LD_PREFIX=/);
#      sysroot    when those cannot be installed (multiarch needs the :ARCH
#                 packages at exactly the installed amd64 versions, which fails
#                 when the mirror's index for ARCH is broken or behind), apt
#                 resolves and downloads the same packages for ARCH alone with a
#                 private state (BUILD_DIR/sysroot-apt: own lists, cache, empty
#                 dpkg status; dpkg and the system's lists are not touched, root
#                 is not needed) and they are unpacked into BUILD_DIR/sysroot,
#                 which the toolchain uses via -DBRAMBLE_CROSS_SYSROOT;
#      CROSS_LIBS=multiarch|sysroot forces one (default auto: multiarch when its
#      packages are installed, else an existing sysroot, else install multiarch,
#      else download the sysroot). Nothing is downloaded when all is there;
#   3. cmake -DCMAKE_TOOLCHAIN_FILE=cmake/<triplet>.cmake, Release, no tests;
#   4. builds bramble-agent, bramble and brambled, checks with `file` that they
#      are ARCH executables and runs `bramble --version` under qemu.
# Idempotent: run it again and it only rebuilds what changed. Writes the qemu
# library prefix (/ or the sysroot) to BUILD_DIR/qemu-ld-prefix.
#
# Exit status 0 with a line "SKIP: <reason>" when the packages cannot be had
# (no network, apt refuses, not root and no sudo, not a Debian system); non-zero
# when they are there but the build fails.
#
# Environment: BUILD_DIR, JOBS (default nproc), CROSS_LIBS (see above).
set -euo pipefail

ARCH=${1:-}
case "$ARCH" in
    arm64) TRIPLET=aarch64-linux-gnu; QEMU=qemu-aarch64; LOADER=/lib/ld-linux-aarch64.so.1
           FILE_MATCH="ARM aarch64" ;;
    armhf) TRIPLET=arm-linux-gnueabihf; QEMU=qemu-arm; LOADER=/lib/ld-linux-armhf.so.3
           FILE_MATCH="32-bit LSB*, ARM, EABI5" ;;
    *) echo "usage: tests/cross-build.sh arm64|armhf [BUILD_DIR]" >&2; exit 2 ;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
BUILD_DIR=${2:-${BUILD_DIR:-build-$ARCH}}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
CROSS_LIBS=${CROSS_LIBS:-auto}
TAG="cross-build $ARCH"

skip() {
    echo "SKIP: $ARCH cross build: $*"
    exit 0
}
note() { echo "$TAG: $*" >&2; }

HOST_DEPS=("gcc-$TRIPLET" "libc6-dev-$ARCH-cross" qemu-user cmake pkg-config file)
# the target's -dev packages (libncurses-dev only for the CLI's live view,
# libmicrohttpd-dev only for brambled's HTTP side)
TARGET_DEV=(libzmq3-dev libsodium-dev libsqlite3-dev libyaml-dev libjansson-dev
            libncurses-dev libmicrohttpd-dev)
MULTIARCH_DEPS=("${TARGET_DEV[@]/%/:$ARCH}")

installed() {
    local status
    status=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
    [ "$status" = "installed" ]
}
missing_of() {  # the arguments that are not installed, one a line
    local p
    for p in "$@"; do installed "$p" || echo "$p"; done
}

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    skip "not a Debian system (no dpkg/apt-get); install a $TRIPLET cross compiler" \
         "and $ARCH libraries by hand"
fi

SUDO=()
have_root() {
    [ "$(id -u)" -eq 0 ] && return 0
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
        return 0
    fi
    return 1
}
APT_OPTS=(-q -o Acquire::Retries=2 -o Acquire::http::Timeout=30)
apt_install() {  # apt_install PKG...: 0 when installed
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" \
        install -y --no-install-recommends "$@"
}

# ---- 1. host packages
mapfile -t missing < <(missing_of "${HOST_DEPS[@]}")
if [ "${#missing[@]}" -gt 0 ]; then
    have_root || skip "packages missing (${missing[*]}) and not root (no password-less" \
                      "sudo) to install them"
    note "installing ${missing[*]}"
    if ! apt_install "${missing[@]}"; then
        "${SUDO[@]}" apt-get "${APT_OPTS[@]}" update ||
            note "apt-get update failed; trying the install anyway"
        apt_install "${missing[@]}" ||
            skip "apt-get could not install ${missing[*]} (no network?)"
    fi
fi

# ---- 2. the target's libraries
SYSROOT="$BUILD_DIR/sysroot"
mkdir -p "$BUILD_DIR"
SYSROOT_ABS="$(cd "$BUILD_DIR" && pwd)/sysroot"

try_multiarch() {  # 0 when the :ARCH -dev packages are (now) installed
    local added=0 missing
    mapfile -t missing < <(missing_of "${MULTIARCH_DEPS[@]}")
    [ "${#missing[@]}" -eq 0 ] && return 0
    have_root || { note "not root: cannot install ${missing[*]}"; return 1; }
    note "installing ${missing[*]}"
    if ! dpkg --print-foreign-architectures | grep -qx "$ARCH"; then
        "${SUDO[@]}" dpkg --add-architecture "$ARCH" || return 1
        added=1
    fi
    # a failed update (one index missing, mirror in sync) may still leave enough
    # to install from: only a failed install counts
    "${SUDO[@]}" apt-get "${APT_OPTS[@]}" update ||
        note "apt-get update failed; trying the install anyway"
    apt_install "${missing[@]}" && return 0
    note "apt-get could not install ${missing[*]} (multiarch needs them at the" \
         "installed amd64 versions; the $ARCH index may be missing or behind)"
    if [ "$added" = 1 ] &&
            ! dpkg-query -W -f='${Architecture}\n' 2>/dev/null | grep -qx "$ARCH"; then
        # leave apt as it was: with ARCH added, a broken ARCH index makes every
        # later `apt-get update` fail
        "${SUDO[@]}" dpkg --remove-architecture "$ARCH" &&
            note "removed the $ARCH architecture again"
    fi
    return 1
}

fetch_sysroot() {  # download and unpack the target packages into $SYSROOT
    local state="$BUILD_DIR/sysroot-apt" apt
    rm -rf "$SYSROOT" "$SYSROOT.tmp" "$state"
    mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
    : >"$state/status"
    # apt drops to the _apt user to download when run as root
    if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then
        chown -R _apt "$state/lists" "$state/cache"
    fi
    apt=(apt-get "${APT_OPTS[@]}" -o Debug::NoLocking=1
         -o Dir::State::Lists="$(cd "$state" && pwd)/lists"
         -o Dir::State::status="$(cd "$state" && pwd)/status"
         -o Dir::Cache="$(cd "$state" && pwd)/cache"
         -o APT::Architecture="$ARCH" -o APT::Architectures::="$ARCH")
    note "downloading the $ARCH libraries into $SYSROOT (private apt state $state)"
    # an index that fails (mirror in sync) is ignored: the others still resolve
    "${apt[@]}" update >"$state/update.log" 2>&1 ||
        note "apt-get update (private, $ARCH only) reported errors; trying anyway:" \
             "$(grep -E '^(E|W):' "$state/update.log" | head -3 | tr '\n' ' ')"
    if ! "${apt[@]}" install -d -y --no-install-recommends libc6-dev "${TARGET_DEV[@]}" \
            >"$state/install.log" 2>&1; then
        tail -5 "$state/install.log" >&2
        return 1
    fi
    mkdir -p "$SYSROOT.tmp"
    local deb
    for deb in "$state"/cache/archives/*.deb; do
        dpkg-deb -x "$deb" "$SYSROOT.tmp"
    done
    touch "$SYSROOT.tmp/.bramble-sysroot-complete"
    mv "$SYSROOT.tmp" "$SYSROOT"
    rm -rf "$state/cache/archives"  # ~35 MB of .debs, unpacked now
}

mode=
case "$CROSS_LIBS" in
    multiarch)
        try_multiarch || skip "the :$ARCH -dev packages cannot be installed" \
                              "(${MULTIARCH_DEPS[*]})"
        mode=multiarch ;;
    sysroot)
        [ -e "$SYSROOT/.bramble-sysroot-complete" ] || fetch_sysroot ||
            skip "could not download the $ARCH packages into $SYSROOT" \
                 "(log: $BUILD_DIR/sysroot-apt/install.log)"
        mode=sysroot ;;
    auto)
        if [ -z "$(missing_of "${MULTIARCH_DEPS[@]}")" ]; then
            mode=multiarch
        elif [ -e "$SYSROOT/.bramble-sysroot-complete" ]; then
            mode=sysroot
        elif try_multiarch; then
            mode=multiarch
        elif fetch_sysroot; then
            mode=sysroot
        else
            skip "neither the :$ARCH -dev packages (${MULTIARCH_DEPS[*]}) could be" \
                 "installed nor the $ARCH packages downloaded into a sysroot" \
                 "(log: $BUILD_DIR/sysroot-apt/install.log)"
        fi ;;
    *) echo "$TAG: CROSS_LIBS must be auto, multiarch or sysroot" >&2; exit 2 ;;
esac
for tool in "$TRIPLET-gcc" "$QEMU" cmake file; do
    command -v "$tool" >/dev/null 2>&1 ||
        skip "$tool not found after installing the packages"
done
if [ "$mode" = sysroot ]; then
    SYSROOT_ARG=(-DBRAMBLE_CROSS_SYSROOT="$SYSROOT_ABS")
    QEMU_PREFIX=$SYSROOT_ABS
else
    SYSROOT_ARG=(-UBRAMBLE_CROSS_SYSROOT)
    QEMU_PREFIX=/
    [ -e "$LOADER" ] || QEMU_PREFIX=/usr/$TRIPLET  # libc only, from the cross package
fi
note "target libraries: $mode"

# ---- 3. configure
if ! cmake -S . -B "$BUILD_DIR" -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/$TRIPLET.cmake" \
        "${SYSROOT_ARG[@]}" -DBRAMBLE_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
        >"$BUILD_DIR/configure.log" 2>&1; then
    cat "$BUILD_DIR/configure.log" >&2
    note "configure failed (log: $BUILD_DIR/configure.log)"
    exit 1
fi

# ---- 4. build and check
cmake --build "$BUILD_DIR" -j "$JOBS" --target bramble-agent bramble brambled
for b in bramble-agent bramble brambled; do
    desc=$(file -b "$BUILD_DIR/bin/$b")
    echo "$BUILD_DIR/bin/$b: $desc"
    # shellcheck disable=SC2254  # FILE_MATCH is a pattern
    case "$desc" in
        *$FILE_MATCH*) ;;
        *) note "$BUILD_DIR/bin/$b is not an $ARCH binary"; exit 1 ;;
    esac
done
echo "$QEMU_PREFIX" >"$BUILD_DIR/qemu-ld-prefix"
if ver=$(QEMU_LD_PREFIX=$QEMU_PREFIX "$QEMU" "$BUILD_DIR/bin/bramble" --version 2>&1); then
    echo "$TAG: $BUILD_DIR/bin/bramble runs under $QEMU: $ver"
else
    note "note: $BUILD_DIR/bin/bramble --version did not exit 0 under $QEMU" \
         "(QEMU_LD_PREFIX=$QEMU_PREFIX): $ver"
fi
echo "$TAG: ok ($mode)"
