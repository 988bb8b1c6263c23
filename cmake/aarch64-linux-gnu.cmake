# CMake toolchain file: cross-compile bramble for aarch64-linux-gnu
# (Debian/Ubuntu cross compiler + multiarch :arm64 -dev packages;
# see docs/raspberry-pi.md).
#
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DBRAMBLE_TESTS=OFF -DCMAKE_BUILD_TYPE=Release
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(BRAMBLE_CROSS_TRIPLET aarch64-linux-gnu)
include(${CMAKE_CURRENT_LIST_DIR}/cross-debian.cmake)
