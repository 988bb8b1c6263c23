# CMake toolchain file: cross-compile bramble for arm-linux-gnueabihf
# (Debian/Ubuntu cross compiler + multiarch :armhf -dev packages;
# see docs/raspberry-pi.md).
#
#   cmake -S . -B build-armhf -DCMAKE_TOOLCHAIN_FILE=cmake/arm-linux-gnueabihf.cmake \
#         -DBRAMBLE_TESTS=OFF -DCMAKE_BUILD_TYPE=Release
set(CMAKE_SYSTEM_PROCESSOR arm)
set(BRAMBLE_CROSS_TRIPLET arm-linux-gnueabihf)
include(${CMAKE_CURRENT_LIST_DIR}/cross-debian.cmake)
