#!/usr/bin/env bash
# Gantry's posix tier vs. fio on the same directory, side by side in one run: a sequential write
# and a sequential read of one large file (default 2 GiB), buffered and direct (O_DIRECT).
# Each measurement runs ROUNDS times, alternating fio and Gantry; the median is reported with
# the ratio gantry/fio (the issue's target: >= 0.9).
#
#   bench/posix_vs_fio.sh                 # build posix_bench, measure, print a Markdown table
#   SIZE_MIB=256 ROUNDS=1 bench/posix_vs_fio.sh   # a quick smoke run
#   bench/posix_vs_fio.sh --write-doc     # also replace the section "## Storage: posix tier vs
#                                         # fio" of docs/performance.md
#
# Environment:
#   GANTRY_BENCH_DIR   the directory both sides use (default: a temp dir under ${TMPDIR:-/tmp})
#   GANTRY_BUILD_DIR   build tree holding bench/posix_bench (default build/release, built with the
#                      release preset)
#   SIZE_MIB ROUNDS    file size (default 2048) and rounds (default 3)
#   PARALLELISM        Gantry's I/O threads per object (default 2)
#
# What is timed. fio: its own bandwidth figure, whose runtime includes the final fsync
# (--end_fsync=1). Gantry: the Put (temp file, writes, fsync, rename, directory fsync) or the
# ReadInto call, from call to return. Neither side's process start is timed. Gantry's source and
# destination buffer is allocated and touched before timing (fio also reuses a touched buffer).
# Reads: buffered reads start cold (the page cache is dropped before each, when writable
# /proc/sys/vm/drop_caches allows; otherwise the script says the reads came from the page cache).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

write_doc=0
case "${1:-}" in
  --write-doc) write_doc=1 ;;
  "") ;;
  *) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac

size_mib="${SIZE_MIB:-2048}"
rounds="${ROUNDS:-3}"
parallelism="${PARALLELISM:-2}"
build="${GANTRY_BUILD_DIR:-build/release}"

say() { printf 'posix_vs_fio: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v fio >/dev/null || die "fio not found (apt-get install fio)"
if [[ -z "${GANTRY_BUILD_DIR:-}" ]]; then
  say "building posix_bench (release preset)"
  cmake --preset release >/dev/null
  cmake --build --preset release --target posix_bench >/dev/null
fi
bench="$build/bench/posix_bench"
[[ -x "$bench" ]] || die "no $bench; build it first"

work="${GANTRY_BENCH_DIR:-}"
made_work=0
if [[ -z "$work" ]]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/gantry-posixbench.XXXXXX")"
  made_work=1
fi
mkdir -p "$work"
cleanup() {
  rm -rf "$work/store" "$work/fio.dat"
  if [[ $made_work -eq 1 ]]; then rmdir "$work" 2>/dev/null || true; fi
}
trap cleanup EXIT

drop_ok=0
if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then drop_ok=1; fi
drop() { if [[ $drop_ok -eq 1 ]]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi; }

# fio's bandwidth in MiB/s for one job: $1 = write|read, rest = extra flags.
fio_run() {
  local rw="$1"; shift
  fio --name=gantry --filename="$work/fio.dat" --rw="$rw" --bs=1M --size="${size_mib}M" \
      --ioengine=psync --end_fsync=1 "$@" --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin)["jobs"][0]; k=sys.argv[1]; print("%.1f" % (d[k]["bw_bytes"]/2**20))' "$rw"
}
gantry_run() {
  "$bench" --dir "$work/store" --size-mib "$size_mib" --parallelism "$parallelism" "$@"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A fio_res gantry_res
for kind in write read; do
  for mode in buffered direct; do
    flag=(); gflag=()
    if [[ $mode == direct ]]; then flag=(--direct=1); gflag=(--direct); fi
    f=(); g=()
    for ((r = 1; r <= rounds; r++)); do
      if [[ $kind == write ]]; then
        rm -f "$work/fio.dat"; rm -rf "$work/store"; sync
        f+=("$(fio_run write "${flag[@]}")")
        rm -f "$work/fio.dat"; sync
        g+=("$(gantry_run --mode write "${gflag[@]}")")
      else
        [[ -f "$work/fio.dat" ]] || fio_run write >/dev/null
        [[ -f "$work/store/bench/object" ]] || gantry_run --mode write >/dev/null
        drop; f+=("$(fio_run read "${flag[@]}")")
        drop; g+=("$(gantry_run --mode read "${gflag[@]}")")
      fi
      say "$kind $mode round $r: fio ${f[-1]} MiB/s, gantry ${g[-1]} MiB/s"
    done
    fio_res[$kind-$mode]="$(median "${f[@]}")"
    gantry_res[$kind-$mode]="$(median "${g[@]}")"
  done
done

cache_note="buffered reads start cold (page cache dropped before each read)"
[[ $drop_ok -eq 1 ]] || cache_note="buffered reads came from the page cache (drop_caches not writable here) for both sides"
table="$(
  echo "| ${size_mib} MiB, sequential | fio MiB/s | Gantry MiB/s | gantry/fio |"
  echo "|---|---:|---:|---:|"
  for kind in write read; do
    for mode in buffered direct; do
      fv="${fio_res[$kind-$mode]}"; gv="${gantry_res[$kind-$mode]}"
      echo "| $kind, $mode | $fv | $gv | $(awk -v a="$gv" -v b="$fv" 'BEGIN {printf "%.2f", a / b}') |"
    done
  done
)"
echo "$table"
echo
echo "Median of $rounds rounds, fio and Gantry alternating; $cache_note; Gantry parallelism $parallelism."

if [[ $write_doc -eq 1 ]]; then
  doc=docs/performance.md
  touch "$doc"
  block="$(mktemp)"
  {
    echo "<!-- posix_vs_fio:begin (generated by bench/posix_vs_fio.sh --write-doc) -->"
    echo "Measured $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo ' plus uncommitted changes'), on $(nproc) cores (load average $(cut -d' ' -f1-3 /proc/loadavg) when it finished), directory on $(df -T "$work" | awk 'NR==2 {print $2}'): \`bench/posix_vs_fio.sh\` (SIZE_MIB=$size_mib ROUNDS=$rounds)."
    echo
    echo "$table"
    echo
    echo "Median of $rounds rounds, fio and Gantry alternating; $cache_note; Gantry parallelism $parallelism."
    echo "<!-- posix_vs_fio:end -->"
  } >"$block"
  tmp="$(mktemp)"
  if grep -q '^<!-- posix_vs_fio:begin' "$doc"; then
    # Replace only the generated block: the notes written around it by hand stay.
    awk -v block="$block" '
      /^<!-- posix_vs_fio:begin/ {while ((getline line < block) > 0) print line; skip=1; next}
      /^<!-- posix_vs_fio:end/ {skip=0; next}
      !skip' "$doc" >"$tmp"
  else
    { cat "$doc"; echo; echo "## Storage: posix tier vs fio"; echo; cat "$block"; } >"$tmp"
  fi
  cat "$tmp" >"$doc"
  rm -f "$tmp" "$block"
  say "wrote the measurements to $doc"
fi
