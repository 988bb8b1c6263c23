#!/usr/bin/env bash
# tests/fuzz/jansson.sh - build jansson from Debian's source package with the
# fuzzer's instrumentation, so that the JSON paths the fuzz targets go through
# count in coverage (and are checked by ASan/UBSan).
#
# Usage: tests/fuzz/jansson.sh [BUILD_DIR]      (default: build-fuzz)
#
# Result: BUILD_DIR/jansson/{include/jansson*.h, lib/libjansson.a, BUILD-INFO};
# the fuzz CMake build (-DBRAMBLE_FUZZ=ON) links against it when it is there and
# against the system's libjansson otherwise. Does nothing when it is built already.
# When the source cannot be had (no deb-src reachable, not root, no network) it
# prints one line saying the JSON paths are not instrumented and exits 0: the
# fuzz targets still build and run against the system jansson.
#
# What it does the first time: makes sure APT knows a deb-src entry for Debian's
# main archive (one derived from the configured deb entries of this release,
# written to /etc/apt/sources.list.d/bramble-jansson-src.sources, then an
# `apt-get update` of that entry only), `apt-get source jansson` (the version
# installed, when it can), then jansson's CMake build of a static library with clang
# and -fsanitize=fuzzer-no-link,address,undefined (without undefined if that fails).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${1:-build-fuzz}
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
PREFIX="$BUILD/jansson"
SRCDIR="$BUILD/jansson-src"
SRC_LIST=/etc/apt/sources.list.d/bramble-jansson-src.sources
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

say() { echo "jansson.sh: $*"; }
not_instrumented() {
    echo "fuzz: JSON paths are NOT instrumented (fuzzing against the system jansson): $*"
    exit 0
}

if [ -f "$PREFIX/lib/libjansson.a" ] && [ -f "$PREFIX/BUILD-INFO" ]; then
    say "instrumented jansson present: $(head -1 "$PREFIX/BUILD-INFO")"
    exit 0
fi

command -v clang >/dev/null 2>&1 || not_instrumented "clang not found"
command -v apt-get >/dev/null 2>&1 || not_instrumented "apt-get not found (not Debian)"
command -v dpkg-source >/dev/null 2>&1 || not_instrumented "dpkg-source not found (install dpkg-dev)"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        SUDO=(false)
    fi
fi

# Whether APT already knows where jansson's source is.
have_source() { [ -n "$(apt-cache showsrc jansson 2>/dev/null)" ]; }

# Print "URI SIGNED-BY" of the first deb entry for this release's main component
# (SIGNED-BY "-" when none), from one-line .list files and deb822 .sources files.
main_deb_entry() {
    local codename=$1 f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v rel="$codename" '
            $1 == "deb" {
                i = 2; opts = ""
                if ($i ~ /^\[/) { while ($i !~ /\]$/) { opts = opts " " $i; i++ } opts = opts " " $i; i++ }
                uri = $i; suite = $(i + 1); main = 0
                for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
                if (suite == rel && main) {
                    sb = "-"
                    if (match(opts, /signed-by=[^] ]+/)) sb = substr(opts, RSTART + 10, RLENGTH - 10)
                    print uri, sb; exit
                }
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        [ "$f" = "$SRC_LIST" ] && continue
        awk -v rel="$codename" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " rel " ") &&
                    (" " comps " ") ~ / main / && uri != "" && enabled != "no") {
                    print uri, (sb == "" ? "-" : sb); found = 1; exit
                }
                types = suites = comps = uri = sb = enabled = ""
            }
            /^[[:space:]]*#/ { next }
            /^[[:space:]]*$/ { flush(); next }
            {
                key = tolower($1); sub(/:$/, "", key)
                val = $0; sub(/^[^:]*:[[:space:]]*/, "", val)
                if (key == "types") types = val
                else if (key == "uris") { split(val, u, " "); uri = u[1] }
                else if (key == "suites") suites = val
                else if (key == "components") comps = val
                else if (key == "signed-by") sb = val
                else if (key == "enabled") enabled = tolower(val)
            }
            END { if (!found) flush() }' "$f"
    done | head -1
}

if ! have_source; then
    codename=$( . /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}" )
    [ -n "$codename" ] || not_instrumented "no release codename in /etc/os-release"
    read -r uri signed_by < <(main_deb_entry "$codename" || true) || true
    [ -n "${uri:-}" ] || not_instrumented "no deb entry for $codename main in APT's sources"
    say "adding a deb-src entry for $uri $codename main ($SRC_LIST)"
    entry="Types: deb-src
URIs: $uri
Suites: $codename
Components: main"
    if [ "${signed_by:--}" != "-" ]; then
        entry="$entry
Signed-By: $signed_by"
    fi
    printf '%s\n' "$entry" | "${SUDO[@]}" tee "$SRC_LIST" >/dev/null 2>&1 ||
        not_instrumented "cannot write $SRC_LIST (needs root or sudo)"
    # refresh only the entry just added: the other lists stay as they are
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q \
        -o Dir::Etc::sourcelist="$SRC_LIST" -o Dir::Etc::sourceparts=- \
        -o APT::Get::List-Cleanup=0 >/dev/null 2>&1 ||
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 ||
        not_instrumented "apt-get update failed for $uri (mirror not reachable?)"
    have_source || not_instrumented "APT still knows no source for jansson"
fi

# The source of the jansson installed (same headers as the system's), else the newest.
rm -rf "$SRCDIR"
mkdir -p "$SRCDIR"
version=$(dpkg-query -W -f='${source:Version}\n' libjansson-dev 2>/dev/null | head -1 || true)
say "apt-get source jansson${version:+=$version}"
if ! (cd "$SRCDIR" && { { [ -n "$version" ] && apt-get source -q "jansson=$version"; } ||
                        apt-get source -q jansson; }) >"$SRCDIR/source.log" 2>&1; then
    tail -5 "$SRCDIR/source.log"
    not_instrumented "apt-get source jansson failed"
fi
tree=$(find "$SRCDIR" -mindepth 1 -maxdepth 1 -type d -name 'jansson-*' | head -1)
[ -n "$tree" ] || not_instrumented "apt-get source unpacked no jansson-* directory"
[ -f "$tree/CMakeLists.txt" ] || not_instrumented "no CMakeLists.txt in $(basename "$tree")"
command -v cmake >/dev/null 2>&1 || not_instrumented "cmake not found"

# configure + build a static library into $PREFIX with the given sanitizers, with
# jansson's own CMake build (Debian builds the same sources with autotools)
build_with() {
    local san=$1 log="$SRCDIR/build-${1//,/-}.log"
    local cflags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,$san"
    [[ "$san" == *undefined* ]] && cflags="$cflags -fno-sanitize-recover=undefined"
    rm -rf "$SRCDIR/obj" "$PREFIX"
    say "building $(basename "$tree") with CFLAGS='$cflags' (log: $log)"
    if { CC=clang cmake -S "$tree" -B "$SRCDIR/obj" -DCMAKE_BUILD_TYPE=None \
            -DCMAKE_C_FLAGS="$cflags" -DCMAKE_INSTALL_PREFIX="$PREFIX" \
            -DCMAKE_INSTALL_LIBDIR=lib -DJANSSON_BUILD_SHARED_LIBS=OFF \
            -DJANSSON_EXAMPLES=OFF -DJANSSON_BUILD_DOCS=OFF -DJANSSON_WITHOUT_TESTS=ON &&
          cmake --build "$SRCDIR/obj" -j "$JOBS" &&
          cmake --install "$SRCDIR/obj"; } >"$log" 2>&1 &&
            [ -f "$PREFIX/lib/libjansson.a" ] && [ -f "$PREFIX/include/jansson.h" ]; then
        printf 'jansson %s (Debian source), clang %s, static, CFLAGS=%s\n' \
            "${version:-$(basename "$tree")}" \
            "$(clang -dumpversion 2>/dev/null || echo '?')" "$cflags" >"$PREFIX/BUILD-INFO"
        return 0
    fi
    tail -15 "$log"
    return 1
}
build_with address,undefined || build_with address ||
    not_instrumented "building jansson from source failed"
say "instrumented jansson ready: $(head -1 "$PREFIX/BUILD-INFO")"
