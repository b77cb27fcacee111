# Shared by the tests of the GPU machine's Python tools (trace_summary_test.sh,
# ncu_stalls_test.sh), sourced after setting `name`: requires python3, makes the scratch folder
# $t (removed at exit), and gives expect / absent, which check $t/out.txt for a line fragment
# and set fail=1 when it is missing / present.
cd "$(dirname "$0")/.."
if ! command -v python3 > /dev/null; then
  echo "$name: python3 is required"
  exit 1
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
expect() {
  if ! grep -qF -- "$1" "$t/out.txt"; then
    echo "$name: missing: $1"
    fail=1
  fi
}
absent() {
  if grep -qF -- "$1" "$t/out.txt"; then
    echo "$name: unexpected: $1"
    fail=1
  fi
}
