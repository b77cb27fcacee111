#!/usr/bin/env bash
# Runs every line of the README's ```bash blocks that starts with "dsv4 " against the built CLI
# (blocks marked ```text need a real checkpoint and are not run). Fails on the first non-zero
# exit, printing the line.
set -u
cli=$1
readme=$(dirname "$0")/../README.md
cd "$(dirname "$0")/.."
n=0
while IFS= read -r line; do
  n=$((n + 1))
  echo "== ${line}"
  if ! eval "$cli ${line#dsv4 }" > /tmp/dsv4_readme_$$.out 2>&1; then
    cat /tmp/dsv4_readme_$$.out
    echo "readme: failed: $line"
    rm -f /tmp/dsv4_readme_$$.out
    exit 1
  fi
  tail -n 2 /tmp/dsv4_readme_$$.out
done < <(awk '/^```bash$/{on=1; next} /^```/{on=0} on && /^dsv4 /' "$readme")
rm -f /tmp/dsv4_readme_$$.out
[ "$n" -gt 0 ] || { echo "readme: no runnable examples found"; exit 1; }
echo "readme: $n examples ran"
