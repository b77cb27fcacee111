#!/usr/bin/env bash
# The dependency rule: each layer includes only itself and the layers below it.
#   base <- formats <- ops <- model ; backend/cpu implements ops ; cli and server see include/dsv4 only.
set -u
cd "$(dirname "$0")/.."
fail=0
check() {  # folder, allowed include prefixes (regex)
  local dir=$1 allowed=$2
  [ -d "$dir" ] || return 0
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(echo "$line" | sed -E 's/.*#include "([^"]+)".*/\1/')
    if ! echo "$inc" | grep -qE "^($allowed)"; then
      echo "layering: $file includes \"$inc\" (allowed: $allowed)"
      fail=1
    fi
  done < <(grep -rn '#include "' "$dir" --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh')
}
check src/base 'base/|dsv4/(status|check|sampling)\.h'
check src/formats 'base/|formats/|dsv4/(status|check|sampling)\.h'
check src/ops 'base/|formats/|ops/|dsv4/(status|check|sampling)\.h'
check src/backend/cpu 'base/|formats/|ops/|backend/cpu/|dsv4/(status|check|sampling)\.h'
check src/backend/cuda 'base/|formats/|ops/|backend/cuda/|dsv4/(status|check|sampling)\.h'
check src/model 'base/|formats/|ops/|model/|dsv4/(status|check|sampling)\.h'
check src/cli 'dsv4/|cli/'
check src/server 'dsv4/|server/'
exit $fail
