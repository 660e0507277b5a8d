#!/usr/bin/env bash
# The installation a site does (docs/slurm.md, "Installing on a real Slurm site"), into a
# temporary prefix: what `cmake --install` puts there; that systemd accepts the units as
# installed, without a single warning; and that each unit's command line, with the shipped flag
# file's values (its /etc, /var/lib and /nvme paths moved under the temporary directory), is
# accepted by the installed program: `gantryd --check` passes and fails where it should, the
# agent serves, the fail-open sweep runs. Last, an installed `gantry` draws its report with the
# installed chart library, not the build tree's.
#
#   tests/install_test.sh BUILD_DIR SOURCE_DIR     (ctest runs it as deploy_install)
set -euo pipefail
build="$(cd "$1" && pwd)"
src="$(cd "$2" && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gantry-install-test.XXXXXX")"
agent_pid=""
cleanup() {
  if [[ -n "$agent_pid" ]]; then kill "$agent_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

prefix="$tmp/usr"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log" >&2
  fail "cmake --install"
}
units="$prefix/lib/systemd/system"
for f in bin/gantry bin/gantryd bin/gantry-agent share/gantry/slurm/job_submit.lua \
  share/gantry/slurm/slurm.conf.gantry share/gantry/default/gantryd \
  share/gantry/default/gantry-agent share/gantry/systemd/slurmctld-gantry.conf \
  lib/systemd/system/gantryd.service lib/systemd/system/gantry-agent.service \
  lib/systemd/system/gantry-failopen.service lib/systemd/system/gantry-failopen.timer \
  share/doc/gantry/LICENSE share/doc/gantry/slurm.md; do
  [[ -s "$prefix/$f" ]] || fail "cmake --install did not install $f"
done
cmp -s "$src/src/slurm/job_submit.lua" "$prefix/share/gantry/slurm/job_submit.lua" ||
  fail "the installed job_submit.lua is not the tested one"

# The units: every placeholder filled with this prefix, and systemd's own parser content.
if grep -n '@[A-Z_]*@' "$units"/*; then fail "a placeholder is left in the installed units"; fi
grep -q "^ExecStart=$prefix/bin/gantryd " "$units/gantryd.service" ||
  fail "gantryd.service does not run $prefix/bin/gantryd"
command -v systemd-analyze >/dev/null || fail "systemd-analyze is missing (scripts/setup installs systemd)"
# verify warns about what it ignores (an unknown key, a bad value) yet exits 0: both count.
verify="$(cd "$units" && systemd-analyze verify --man=no gantryd.service gantry-agent.service \
  gantry-failopen.service gantry-failopen.timer 2>&1)" || fail "systemd-analyze verify: $verify"
[[ -z "$verify" ]] || fail "systemd-analyze verify warned: $verify"

# The unit's command line (after KEY=), with $VAR expanded from the shipped flag file, the way
# systemd does for an unbraced $VAR: split on white space.
command_of() {  # UNIT KEY
  sed -n "s/^$2=//p" "$units/$1"
}
moved() {  # the flag file with its host paths under $tmp
  sed -e "s#/etc/gantry/#$tmp/etc/gantry/#g" -e "s#/var/lib/gantry/#$tmp/var/lib/gantry/#g" \
    -e "s#/nvme/#$tmp/nvme/#g" "$prefix/share/gantry/default/$1"
}
moved gantryd >"$tmp/gantryd.env"
moved gantry-agent >"$tmp/gantry-agent.env"
# shellcheck disable=SC1091
source "$tmp/gantryd.env"
# shellcheck disable=SC1091
source "$tmp/gantry-agent.env"
[[ "$GANTRYD_OPTIONS" == *"--cluster $tmp/etc/gantry/cluster.yaml"* ]] ||
  fail "the shipped GANTRYD_OPTIONS no longer name /etc/gantry/cluster.yaml: $GANTRYD_OPTIONS"

mkdir -p "$tmp/etc/gantry" "$tmp/var/lib/gantry" "$tmp/nvme/gantry/tier" "$tmp/nvme/gantry/cache"
cp "$src/data/clusters/tiny.yaml" "$tmp/etc/gantry/cluster.yaml"  # teams a and b
printf 'a team-a-token\nb team-b-token\n' >"$tmp/etc/gantry/tokens"
echo operator-token >"$tmp/etc/gantry/operator-token"
echo agent-token >"$tmp/etc/gantry/agent-token"
chmod 600 "$tmp/etc/gantry/tokens" "$tmp/etc/gantry/operator-token" "$tmp/etc/gantry/agent-token"

# gantryd.service's ExecStartPre: the check passes, quietly, and says what it found.
pre="$(command_of gantryd.service ExecStartPre)"
[[ "$pre" == "$prefix/bin/gantryd --check \$GANTRYD_OPTIONS" ]] || fail "ExecStartPre is '$pre'"
check() {
  # shellcheck disable=SC2086  # split as systemd splits $GANTRYD_OPTIONS
  "$prefix/bin/gantryd" --check $GANTRYD_OPTIONS >"$tmp/check.out" 2>"$tmp/check.err"
}
check || fail "gantryd --check with the shipped flags exited $?: $(cat "$tmp/check.err")"
[[ ! -s "$tmp/check.err" ]] || fail "gantryd --check warned: $(cat "$tmp/check.err")"
grep -q "^cluster .*: 4 nodes, 16 GPUs, 2 teams$" "$tmp/check.out" ||
  fail "gantryd --check: $(cat "$tmp/check.out")"
grep -q "^ok$" "$tmp/check.out" || fail "gantryd --check did not say ok: $(cat "$tmp/check.out")"

# ... and refuses what would stop the daemon: no folder for its state (exit 3).
rmdir "$tmp/var/lib/gantry"
rc=0
check || rc=$?
[[ $rc == 3 ]] || fail "gantryd --check without its state folder exited $rc, not 3"
grep -q -- "--state: folder $tmp/var/lib/gantry of" "$tmp/check.err" ||
  fail "gantryd --check did not name the state folder: $(cat "$tmp/check.err")"
mkdir "$tmp/var/lib/gantry"
# ... warns of a token file others may read and of a token whose team the spec lacks (exit 0).
chmod 644 "$tmp/etc/gantry/operator-token"
echo "nobody stray-token" >>"$tmp/etc/gantry/tokens"
check || fail "gantryd --check exited $? on warnings alone"
grep -q "warning: $tmp/etc/gantry/operator-token may be read by its group or others (mode 0644)" \
  "$tmp/check.err" || fail "no warning for a readable token file: $(cat "$tmp/check.err")"
grep -q "warning: a token of team 'nobody'" "$tmp/check.err" ||
  fail "no warning for a token of an unknown team: $(cat "$tmp/check.err")"
# ... and a spec that does not load is a usage error (exit 2), as it is for the daemon.
echo "nodes: [" >"$tmp/etc/gantry/cluster.yaml"
rc=0
check || rc=$?
[[ $rc == 2 ]] || fail "gantryd --check with a damaged spec exited $rc, not 2"

# gantry-agent.service's ExecStart serves: on a free loopback port instead of 0.0.0.0:7070.
start="$(command_of gantry-agent.service ExecStart)"
[[ "$start" == "$prefix/bin/gantry-agent \$GANTRY_AGENT_OPTIONS" ]] || fail "ExecStart is '$start'"
[[ "$GANTRY_AGENT_OPTIONS" == *"--listen 0.0.0.0:7070"* ]] ||
  fail "the shipped GANTRY_AGENT_OPTIONS changed their --listen: $GANTRY_AGENT_OPTIONS"
GANTRY_AGENT_OPTIONS="${GANTRY_AGENT_OPTIONS/--listen 0.0.0.0:7070/--listen 127.0.0.1:0}"
# shellcheck disable=SC2086
"$prefix/bin/gantry-agent" $GANTRY_AGENT_OPTIONS --port-file "$tmp/agent.port" >"$tmp/agent.out" \
  2>"$tmp/agent.err" &
agent_pid=$!
for _ in $(seq 100); do
  [[ -s "$tmp/agent.port" ]] && break
  kill -0 "$agent_pid" 2>/dev/null || fail "gantry-agent exited: $(cat "$tmp/agent.err")"
  sleep 0.1
done
[[ -s "$tmp/agent.port" ]] || fail "gantry-agent did not listen within 10 s"
port="$(cat "$tmp/agent.port")"
code="$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer agent-token' \
  "http://127.0.0.1:$port/metrics")"
[[ "$code" == 200 ]] || fail "the agent's /metrics with its token answered $code"
code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/metrics")"
[[ "$code" == 401 ]] || fail "the agent's /metrics without a token answered $code, not 401"
kill -TERM "$agent_pid"
rc=0
wait "$agent_pid" || rc=$?
agent_pid=""
[[ $rc == 0 ]] || fail "gantry-agent exited $rc after SIGTERM: $(cat "$tmp/agent.err")"

# gantry-failopen.service's ExecStart, before gantryd ever wrote a heartbeat: nothing to do.
start="$(command_of gantry-failopen.service ExecStart)"
[[ "$start" == "$prefix/bin/gantry failopen \$GANTRY_FAILOPEN_OPTIONS" ]] ||
  fail "ExecStart is '$start'"
# shellcheck disable=SC2086
out="$("$prefix/bin/gantry" failopen $GANTRY_FAILOPEN_OPTIONS 2>&1)" ||
  fail "gantry failopen exited $?: $out"
[[ "$out" == *"no heartbeat at $tmp/var/lib/gantry/heartbeat"* ]] ||
  fail "gantry failopen: $out"

# The installed gantry reads the installed chart library: marked here, found in its report.
lib="$prefix/share/gantry/web/vega/build/vega.min.js"
[[ -s "$lib" ]] || fail "the chart library was not installed (scripts/setup runs npm ci --prefix web)"
echo "/* the installed copy */" >>"$lib"
(unset GANTRY_WEB_DIR
  "$prefix/bin/gantry" sim --cluster "$src/data/clusters/philly-256.yaml" \
    --trace "$src/data/philly-sample.csv" --format philly --profile fifo \
    --out "$tmp/sim" >"$tmp/sim.log" 2>&1) || fail "gantry sim: $(tail -5 "$tmp/sim.log")"
grep -q "the installed copy" "$tmp/sim/report.html" ||
  fail "the installed gantry's report does not inline the installed chart library"
echo "install test passed: $prefix"
