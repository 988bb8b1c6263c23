# Shared part of the Debian multiarch cross toolchains (cmake/<triplet>.cmake set
# CMAKE_SYSTEM_PROCESSOR and BRAMBLE_CROSS_TRIPLET, then include this file).
set(CMAKE_SYSTEM_NAME Linux)

set(CMAKE_C_COMPILER ${BRAMBLE_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${BRAMBLE_CROSS_TRIPLET}-g++)
set(CMAKE_AR ${BRAMBLE_CROSS_TRIPLET}-ar CACHE FILEPATH "archiver")
set(CMAKE_RANLIB ${BRAMBLE_CROSS_TRIPLET}-ranlib CACHE FILEPATH "ranlib")
set(CMAKE_STRIP ${BRAMBLE_CROSS_TRIPLET}-strip CACHE FILEPATH "strip")

# Multiarch: the target's libraries and headers live in /usr/lib/<triplet>,
# /usr/include/<triplet> (and the arch-independent /usr/include) on the build
# host itself; the cross toolchain's own files in /usr/<triplet>.
set(CMAKE_FIND_ROOT_PATH /usr/${BRAMBLE_CROSS_TRIPLET} /)
set(CMAKE_LIBRARY_ARCHITECTURE ${BRAMBLE_CROSS_TRIPLET})
# programs (cmake helpers, pkg-config) from the host; libraries, headers and
# packages from the target only
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# With "/" in CMAKE_FIND_ROOT_PATH absolute hints are taken as they are, so the
# build host's own libraries must be ruled out by name: its multiarch dirs and
# an x86-64 CUDA/NCCL in /usr/local/cuda (the optional NCCL probe would
# otherwise find the host's libnccl.so).
set(CMAKE_IGNORE_PATH
    /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu
    /usr/local/cuda/lib64 /usr/local/cuda/include
    /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/targets/x86_64-linux/include)
set(CMAKE_IGNORE_PREFIX_PATH /usr/local/cuda)  # CMake >= 3.23

# Optional: -DBRAMBLE_CROSS_SYSROOT=DIR, the target's libc and libraries unpacked
# (dpkg-deb -x) into DIR instead of installed with multiarch, for when the
# :<arch> packages cannot be installed (tests/cross-build.sh falls back to it).
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES BRAMBLE_CROSS_SYSROOT)
if(BRAMBLE_CROSS_SYSROOT)
  set(CMAKE_SYSROOT ${BRAMBLE_CROSS_SYSROOT})
  set(CMAKE_FIND_ROOT_PATH ${BRAMBLE_CROSS_SYSROOT})
  set(_br_pc_root ${BRAMBLE_CROSS_SYSROOT})
else()
  set(_br_pc_root "")
endif()

# pkg-config: only the target's .pc files (plus the arch-independent ones);
# with multiarch no sysroot prefix, the paths are already absolute host paths.
set(ENV{PKG_CONFIG_LIBDIR}
    "${_br_pc_root}/usr/lib/${BRAMBLE_CROSS_TRIPLET}/pkgconfig:${_br_pc_root}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${_br_pc_root}")
