#!/usr/bin/env bash
# tests/cross-arm64.sh [BUILD_DIR] - cross-build bramble for arm64
# (aarch64-linux-gnu) into BUILD_DIR (default $BUILD_DIR, else build-arm64/),
# installing what is missing first: `tests/cross-build.sh arm64`, which see.
# Exit status 0 with a line "SKIP: <reason>" when the packages cannot be had.
exec bash "$(dirname "${BASH_SOURCE[0]}")/cross-build.sh" arm64 "$@"
