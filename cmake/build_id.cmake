# The build ID (DESIGN.md, "Plugins"; docs/plugins.md): run at build time by
# the kiln_build_id target as
#
#   cmake -DSOURCE_DIR=... -DHEADERS=FILE -DCOMPILER=TEXT -DMAP_TEMPLATE=FILE -DOUTPUT_DIR=DIR -P build_id.cmake
#
# HEADERS names a file listing, one per line and relative to SOURCE_DIR,
# every header a plugin can compile against (all of kiln's own: src/ and
# include/kiln/). The ID is the first 16 hex digits of a SHA-256 over each
# header's path and SHA-256 and over COMPILER (the compiler, its version and
# flags), so it changes whenever any of them does, and libkiln and the
# plugins of one build always agree. Writes OUTPUT_DIR/kiln/build_id.hpp
# (KILN_BUILD_ID) and OUTPUT_DIR/kiln.map (libkiln's version script from
# MAP_TEMPLATE, whose private node is named after the ID), each only when
# its content changes, so an unchanged ID recompiles and relinks nothing.
cmake_minimum_required(VERSION 3.22)

foreach(var SOURCE_DIR HEADERS COMPILER MAP_TEMPLATE OUTPUT_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "build_id.cmake: ${var} is not set")
  endif()
endforeach()

file(STRINGS ${HEADERS} headers)
list(SORT headers)
set(digest_input "")
foreach(header ${headers})
  file(SHA256 ${SOURCE_DIR}/${header} header_hash)
  string(APPEND digest_input "${header} ${header_hash}\n")
endforeach()
string(APPEND digest_input "compiler ${COMPILER}\n")
string(SHA256 digest "${digest_input}")
string(SUBSTRING ${digest} 0 16 KILN_BUILD_ID)

# Writes the value of the variable named content_var (by name: a version
# script holds semicolons, which would split an argument) to path, unless the
# file already holds it.
function(write_if_changed path content_var)
  if(EXISTS ${path})
    file(READ ${path} old)
    if(old STREQUAL "${${content_var}}")
      return()
    endif()
  endif()
  file(WRITE ${path} "${${content_var}}")
endfunction()

set(header "/* Generated at build time by cmake/build_id.cmake from every header of kiln
 * and the compiler; do not edit. C and C++. */
#ifndef KILN_GENERATED_BUILD_ID_HPP
#define KILN_GENERATED_BUILD_ID_HPP
#define KILN_BUILD_ID \"${KILN_BUILD_ID}\"
#endif
")
write_if_changed(${OUTPUT_DIR}/kiln/build_id.hpp header)
file(READ ${MAP_TEMPLATE} map)
string(REPLACE "@KILN_BUILD_ID@" "${KILN_BUILD_ID}" map "${map}")
write_if_changed(${OUTPUT_DIR}/kiln.map map)
