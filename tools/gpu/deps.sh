#!/usr/bin/env bash
# Run on the dev machine (Debian, network): downloads the Debian packages the build needs into
# DIR (default .devrun/debs, git-ignored), for the GPU machine, which has nvcc, CMake and ninja
# but none of these and no network. tools/gpu/configure.sh unpacks them there into a prefix.
# Of tools/setup.sh's libraries, libgmock-dev is left out: nothing in the build uses it.
set -euo pipefail
dir=${1:-.devrun/debs}
packages=(
  nlohmann-json3-dev libcli11-dev libgtest-dev
  # Google Benchmark (bench/tokenizer_bench): headers, CMake config and the shared library.
  libbenchmark-dev libbenchmark1debian
  # cpp-httplib (the server): Debian's is a compiled library built with OpenSSL, zlib and
  # brotli, whose .pc files pkg-config wants to see.
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev libbrotli-dev libbrotli1
  # PCRE2: the -dev package holds the headers, .pc files and .so links; the tokenizer uses the
  # 8-bit library, the chat parser the 32-bit one.
  libpcre2-dev libpcre2-8-0 libpcre2-32-0
  # pkg-config, which CMake needs to find PCRE2 (the GPU machine's image may lack it).
  pkgconf-bin libpkgconf3
)
rm -rf "$dir"
mkdir -p "$dir"
# (As root, apt-get warns that its sandbox user cannot write to DIR: harmless.)
(cd "$dir" && apt-get download "${packages[@]}")
ls "$dir"
