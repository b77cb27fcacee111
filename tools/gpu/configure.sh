#!/usr/bin/env bash
# Configures the top-level build with a CMake preset (default gpu) against the Debian packages
# that tools/gpu/deps.sh downloaded (DEBS, default .devrun/debs), for a machine without them
# (the GPU machine has nvcc, CMake and ninja only). The packages are unpacked with dpkg -x into
# .devrun/prefix, never into /, so the machine's own files stay as they are.
# Usage, from the repo root: tools/gpu/configure.sh [PRESET [more cmake arguments]]
set -euo pipefail
preset=${1:-gpu}
shift || true
debs=${DEBS:-.devrun/debs}
p=$PWD/.devrun/prefix
ls "$debs"/*.deb >/dev/null  # fails with a message when tools/gpu/deps.sh has not been run
rm -rf "$p"
mkdir -p "$p"
for f in "$debs"/*.deb; do dpkg -x "$f" "$p"; done
lib=$p/usr/lib/x86_64-linux-gnu
# A pkg-config that reads only the prefix's .pc files and puts the prefix in front of the paths
# they name (they say /usr); its own library comes from the prefix too.
cat > "$p/pkg-config" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH=$lib PKG_CONFIG_LIBDIR=$lib/pkgconfig:$p/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$p
exec $p/usr/bin/pkgconf "\$@"
EOF
chmod +x "$p/pkg-config"
# CMAKE_PREFIX_PATH finds the CMake packages (GTest, nlohmann_json) and the PCRE2 libraries;
# the standard include directories give every compile the prefix's headers, as /usr/include
# does on a dev machine (CLI11 is included without a CMake target).
cmake --preset "$preset" -DCMAKE_PREFIX_PATH="$p/usr" -DPKG_CONFIG_EXECUTABLE="$p/pkg-config" \
  -DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES="$p/usr/include" \
  -DCMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES="$p/usr/include" "$@"
