#!/usr/bin/env bash
# tools/gpu/ncu_stalls.py on a made-up Nsight Compute source page (the CSV of `ncu --import R
# --page source --csv --print-source sass`): 100 samples over six instructions, a cluster
# barrier's release fence among them. The reasons' totals, the hot instructions with the running
# share, the barriers and fences with the instruction after each (where a wait's samples land),
# and a CSV without the samples column refused with one line.
set -u
name=ncu_stalls_test
. "$(dirname "$0")/tools_test_lib.sh"
{
  echo '"Kernel Name","void k<1>(Args)",'
  echo '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","stall_barrier","stall_long_sb","stall_membar","stall_selected","stall_barrier (Not Issued)"'
  echo '"0x10","LDG.E R2, desc[UR4][R2.64]","5","0","0","0","0","5","0"'
  echo '"0x20","FMUL R3, R2, R2","40","40","0","40","0","0","0"'
  echo '"0x30","MEMBAR.ALL.GPU","0","0","0","0","0","0","0"'
  echo '"0x40","ERRBAR","30","30","0","0","30","0","0"'
  echo '"0x50","UCGABAR_WAIT","20","20","20","0","0","0","20"'
  echo '"0x60","EXIT","5","0","0","0","0","5","0"'
} > "$t/src.csv"
python3 tools/gpu/ncu_stalls.py "$t/src.csv" --min 10 > "$t/out.txt" 2>&1 || {
  cat "$t/out.txt"
  exit 1
}
expect "void k<1>(Args)"
expect "100 samples, 6 instructions"
expect "| long_sb | 40 | 40.0% |"
expect "| membar | 30 | 30.0% |"
expect "| barrier | 20 | 20.0% |"
expect "| selected | 10 | 10.0% |"
expect "| 1 | 40 | 40.0% | 45.0% | long_sb 40 | \`FMUL R3, R2, R2\` |"
expect "| 3 | 30 | 30.0% | 75.0% | membar 30 | \`ERRBAR\` |"
expect "| 4 | 20 | 20.0% | 95.0% | barrier 20 | \`UCGABAR_WAIT\` |"
absent "| 0 | 5 | 5.0% |"
# The fence has no samples of its own; the ERRBAR after it does.
expect "| 2 | 0 | 45.0% | \`MEMBAR.ALL.GPU\` | 30, \`ERRBAR\` |"
expect "| 4 | 20 | 95.0% | \`UCGABAR_WAIT\` | 5, \`EXIT\` |"
sed 's/Warp Stall Sampling (All Samples)/Instructions Executed/' "$t/src.csv" > "$t/bad.csv"
if python3 tools/gpu/ncu_stalls.py "$t/bad.csv" > "$t/bad.txt" 2>&1 ||
  ! grep -qF "no 'Warp Stall Sampling (All Samples)' column" "$t/bad.txt" || [ "$(wc -l < "$t/bad.txt")" -ne 1 ]; then
  echo "ncu_stalls_test: a CSV without the samples column was not refused with one line:"
  cat "$t/bad.txt"
  fail=1
fi
[ $fail -eq 0 ] || cat "$t/out.txt"
exit $fail
