#!/usr/bin/env bash
# Installs remat into a temporary prefix and builds the README's C example
# against it the four ways docs/library.md shows: pkg-config shared
# (remat) and static (remat-static, and remat --static), and a CMake
# project with find_package(remat), shared and static; each program runs
# and must train (the example's exit status). The shared programs must
# load libremat.so.1 from the prefix, the static ones must not need it.
#
# usage: install_test.sh BUILD_DIR WORK_DIR CC [EXTRA_CFLAGS]
set -euo pipefail
build=$1 work=$2 cc=$3 extra=${4:-}
prefix=$work/prefix
rm -rf "$work" && mkdir -p "$work"
fail() { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
pcdir=$(dirname "$(find "$prefix" -name remat.pc | head -1)")
[ -n "$pcdir" ] || fail "no remat.pc under $prefix"
export PKG_CONFIG_PATH=$pcdir
got=$(pkg-config --variable=prefix remat)
[ "$got" = "$prefix" ] || fail "remat.pc says prefix=$got, installed to $prefix"
libdir=$(pkg-config --variable=libdir remat)
for f in "$libdir/libremat.a" "$libdir/libremat.so.1" "$prefix/include/remat.h" "$prefix/bin/remat"; do
  [ -e "$f" ] || fail "$f was not installed"
done

cmake -DREADME="$(dirname "$0")/../README.md" -DOUT="$work/example.c" -P "$(dirname "$0")/extract_readme.cmake"

needs_remat_so() { readelf -d "$1" | grep -q 'NEEDED.*libremat\.so'; }
run() { # name: runs the example, which exits 0 once its loss fell tenfold
  local out
  out=$(LD_LIBRARY_PATH=$libdir "$work/$1") || fail "$1 failed: $out"
  echo "$1: $out"
}

# pkg-config, shared
$cc $extra "$work/example.c" -o "$work/pc_shared" $(pkg-config --cflags --libs remat)
needs_remat_so "$work/pc_shared" || fail "pc_shared does not load libremat.so"
run pc_shared
# pkg-config, static: remat-static.pc, and remat.pc's --static flags
$cc $extra "$work/example.c" -o "$work/pc_static" $(pkg-config --cflags --libs remat-static)
needs_remat_so "$work/pc_static" && fail "pc_static loads libremat.so"
run pc_static
flags=$(pkg-config --static --libs remat | sed 's/-lremat\b/-l:libremat.a/')
$cc $extra "$work/example.c" -o "$work/pc_static2" $(pkg-config --cflags remat) $flags
needs_remat_so "$work/pc_static2" && fail "pc_static2 loads libremat.so"
run pc_static2

# CMake, find_package(remat)
mkdir -p "$work/cmake_app"
cp "$work/example.c" "$work/cmake_app/example.c"
cat > "$work/cmake_app/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(app LANGUAGES C)
find_package(remat 1.0 REQUIRED)
add_executable(app_shared example.c)
target_link_libraries(app_shared PRIVATE remat::remat)
add_executable(app_static example.c)
target_link_libraries(app_static PRIVATE remat::remat_static)
CM
cmake -S "$work/cmake_app" -B "$work/cmake_app/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" > "$work/cmake_app.log" \
  || { cat "$work/cmake_app.log"; fail "find_package(remat) failed"; }
cmake --build "$work/cmake_app/build" > "$work/cmake_app_build.log" 2>&1 \
  || { cat "$work/cmake_app_build.log"; fail "the CMake project did not build"; }
cp "$work/cmake_app/build/app_shared" "$work/cmake_app/build/app_static" "$work/"
needs_remat_so "$work/app_shared" || fail "app_shared does not load libremat.so"
needs_remat_so "$work/app_static" && fail "app_static loads libremat.so"
run app_shared
run app_static
echo "install_test: all 5 programs built against $prefix and trained"
