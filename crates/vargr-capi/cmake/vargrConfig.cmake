# vargr's CMake package. find_package(vargr CONFIG REQUIRED) defines:
#   vargr::vargr         libvargr.so, the shared library
#   vargr::vargr_static  libvargr.a, with the system libraries it needs
# and vargr_INCLUDE_DIRS (vargr.h, vargr_filter.h), and vargr_COMMNODE (the commnode
# binary, when installed: give it to front-ends as VARGR_COMMNODE). Relocatable: paths are found from this file's location
# (PREFIX/lib/cmake/vargr).
include(CMakeFindDependencyMacro)
find_dependency(Threads)

get_filename_component(_vargr_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(vargr_INCLUDE_DIRS "${_vargr_prefix}/include")
if(EXISTS "${_vargr_prefix}/bin/vargr")
  set(vargr_COMMNODE "${_vargr_prefix}/bin/vargr")
endif()

if(NOT TARGET vargr::vargr)
  add_library(vargr::vargr SHARED IMPORTED)
  set_target_properties(vargr::vargr PROPERTIES
    IMPORTED_LOCATION "${_vargr_prefix}/lib/libvargr.so"
    IMPORTED_SONAME "libvargr.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_vargr_prefix}/include")
endif()

if(NOT TARGET vargr::vargr_static)
  add_library(vargr::vargr_static STATIC IMPORTED)
  set_target_properties(vargr::vargr_static PROPERTIES
    IMPORTED_LOCATION "${_vargr_prefix}/lib/libvargr.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "${_vargr_prefix}/include"
    # rustc --print native-static-libs
    INTERFACE_LINK_LIBRARIES "Threads::Threads;gcc_s;util;rt;m;dl;c")
endif()

unset(_vargr_prefix)
