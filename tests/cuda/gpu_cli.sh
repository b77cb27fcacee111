#!/bin/sh
# Runs a dsv4 command that needs the GPU (ctest label gpu). Without a GPU it exits 77 (ctest:
# skipped) with a message, unless DSV4_EXPECT_GPU is set (to anything but "" or "0"), as on the
# GPU machine: there the command runs and fails on its own when the GPU is unusable.
if [ -z "${DSV4_EXPECT_GPU}" ] || [ "${DSV4_EXPECT_GPU}" = 0 ]; then
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no usable GPU (nvidia-smi -L failed): GPU test skipped (run on the H200)"
    exit 77
  fi
fi
exec "$@"
