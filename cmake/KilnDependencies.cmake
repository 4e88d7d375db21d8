# What building kiln needs beyond a C/C++ compiler, CMake and ninja, each
# found without pkg-config where that is missing (a bare GPU image may lack
# it; scripts/gpu-check.sh and scripts/gpu-rehearsal.sh build there):
#  - zlib: its headers (the system's, or a carried zlib1g-dev's from
#    CMAKE_PREFIX_PATH) and the shared library (libz.so, else the system's
#    libz.so.1, which every Debian or Ubuntu system has).
#  - OpenBLAS: nothing at build time. libkiln loads it at run time
#    (src/backend/cpu/gemm.cpp, with its own declarations in cblas_api.hpp);
#    the build only records the libopenblas.so.0 it finds, to try first,
#    preferring the pthread variant (pkg-config's choice where pkg-config
#    exists); found nowhere, the loader's search for libopenblas.so.0 alone.
#  - CMocka, for the tests only (kiln_find_cmocka): pkg-config where its
#    header is really there, else cmocka.h and libcmocka under the prefixes
#    CMake searches.
# Each outcome is printed, so a build log says what was used.

find_package(PkgConfig QUIET)
find_package(Threads REQUIRED)

# A shared zlib, found before FindZLIB looks: libkiln.so cannot link Debian's
# libz.a (not position-independent), and a carried zlib1g-dev holds libz.a
# beside a libz.so link that dangles without zlib1g, so "z" alone would pick
# the archive there. libz.so.1, the run-time library itself, is on every
# Debian or Ubuntu system.
# Normal variables, so that they also override a cache that an earlier
# configure filled with the archive (FindZLIB's target takes
# ZLIB_LIBRARY_RELEASE in a Release build).
find_library(KILN_ZLIB_LIBRARY NAMES libz.so libz.so.1)
if(KILN_ZLIB_LIBRARY)
  set(ZLIB_LIBRARY ${KILN_ZLIB_LIBRARY})
  set(ZLIB_LIBRARY_RELEASE ${KILN_ZLIB_LIBRARY})
endif()
find_package(ZLIB)
if(NOT ZLIB_FOUND)
  message(FATAL_ERROR "kiln needs zlib's headers (zlib.h) and library: install zlib1g-dev, or point "
    "CMAKE_PREFIX_PATH at a tree holding include/zlib.h (scripts/gpu-check.sh unpacks a carried zlib1g-dev)")
endif()
message(STATUS "zlib: ${ZLIB_INCLUDE_DIRS}, ${ZLIB_LIBRARIES}")

if(PKG_CONFIG_FOUND)
  pkg_check_modules(OPENBLAS QUIET openblas)
endif()
find_library(KILN_OPENBLAS_LIBRARY NAMES libopenblas.so.0 openblas HINTS ${OPENBLAS_LIBRARY_DIRS}
  PATH_SUFFIXES openblas-pthread)
if(KILN_OPENBLAS_LIBRARY)
  get_filename_component(_kiln_openblas_dir ${KILN_OPENBLAS_LIBRARY} DIRECTORY)
  set(KILN_OPENBLAS_PATH "${_kiln_openblas_dir}/libopenblas.so.0")
  message(STATUS "OpenBLAS: loaded at run time, first from ${KILN_OPENBLAS_PATH}")
else()
  set(KILN_OPENBLAS_PATH "libopenblas.so.0")
  message(STATUS "OpenBLAS: not found now; libkiln loads libopenblas.so.0 at run time through the loader's "
    "search (LD_LIBRARY_PATH, the system's), and the CPU backend fails with a clear error where there is none")
endif()

# The CMake target kiln::cmocka, for the tests.
function(kiln_find_cmocka)
  if(TARGET kiln::cmocka)
    return()
  endif()
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(CMOCKA QUIET IMPORTED_TARGET cmocka)
  endif()
  # A cmocka.pc unpacked from a carried package (scripts/gpu-check.sh) still
  # says prefix=/usr, where neither header nor library is: trust pkg-config
  # only where the header it promises is there.
  if(CMOCKA_FOUND)
    include(CheckIncludeFiles)
    set(CMAKE_REQUIRED_INCLUDES ${CMOCKA_INCLUDE_DIRS})
    set(CMAKE_REQUIRED_QUIET ON)
    check_include_files("stdarg.h;stddef.h;stdint.h;setjmp.h;cmocka.h" KILN_CMOCKA_PC_HEADER_FOUND)
    if(NOT KILN_CMOCKA_PC_HEADER_FOUND)
      message(STATUS "CMocka: pkg-config's cmocka.pc names include dirs without cmocka.h; searching the prefixes")
      set(CMOCKA_FOUND FALSE)
    endif()
  endif()
  if(CMOCKA_FOUND)
    add_library(kiln::cmocka ALIAS PkgConfig::CMOCKA)
    message(STATUS "CMocka: ${CMOCKA_VERSION} (pkg-config)")
    return()
  endif()
  find_path(KILN_CMOCKA_INCLUDE_DIR cmocka.h)
  find_library(KILN_CMOCKA_LIBRARY NAMES cmocka libcmocka.so.0)
  if(NOT KILN_CMOCKA_INCLUDE_DIR OR NOT KILN_CMOCKA_LIBRARY)
    message(FATAL_ERROR "the tests need CMocka (cmocka.h, libcmocka): install libcmocka-dev, point "
      "CMAKE_PREFIX_PATH at a tree holding it, or configure with -DKILN_BUILD_TESTS=OFF")
  endif()
  add_library(kiln_cmocka UNKNOWN IMPORTED GLOBAL)
  set_target_properties(kiln_cmocka PROPERTIES IMPORTED_LOCATION ${KILN_CMOCKA_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${KILN_CMOCKA_INCLUDE_DIR})
  add_library(kiln::cmocka ALIAS kiln_cmocka)
  message(STATUS "CMocka: ${KILN_CMOCKA_LIBRARY} (without pkg-config)")
endfunction()
