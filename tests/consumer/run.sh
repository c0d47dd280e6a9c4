#!/bin/sh
# Installs a dsa build into a fresh prefix and builds tests/consumer against the installed package:
# through CMake (dsa::dsa, dsa::dsa_static) and through pkg-config (dsa, dsa_static), running each.
# Usage: run.sh BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR
set -eu
build=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
cmake -S "$src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log"
cmake --build "$work/cmake" >>"$work/cmake.log"
"$work/cmake/consumer_shared"
"$work/cmake/consumer_static"
pcdir=$(dirname "$(find "$work/prefix" -name dsa.pc | head -n 1)")
export PKG_CONFIG_PATH="$pcdir"
libdir=$(pkg-config --variable=libdir dsa)
${CC:-cc} "$src/main.c" -o "$work/pkgconfig_shared" $(pkg-config --cflags --libs dsa)
LD_LIBRARY_PATH="$libdir" "$work/pkgconfig_shared"
${CC:-cc} "$src/main.c" -o "$work/pkgconfig_static" $(pkg-config --cflags --libs dsa_static)
"$work/pkgconfig_static"
# The shared library exports the public API and nothing else.
extra=$(nm -D --defined-only "$libdir"/libdsa.so | awk '{print $3}' | grep -v '^dsa_' || true)
if [ -n "$extra" ]; then
  echo "FAIL consumer: libdsa.so exports more than the dsa_* API:"
  echo "$extra" | head -n 20
  exit 1
fi
echo "ok   consumer: libdsa.so exports $(nm -D --defined-only "$libdir"/libdsa.so | grep -c ' dsa_') dsa_* symbols only"
