# shellcheck shell=bash
# Shared helpers for the scripts in this directory. Source it; it defines functions and
# GANTRY_ROOT (the repository root) and changes nothing else.

# shellcheck disable=SC2034  # used by the scripts that source this file
GANTRY_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Messages go to stderr so stdout stays free for the commands' own output.
gantry_say() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }
gantry_die() { printf '%s: error: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# Runs "$@" as root: directly when already root, otherwise through sudo.
gantry_as_root() {
  if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    gantry_die "need root to run '$*' and sudo is not installed"
  fi
}

# Prints the seconds elapsed since the epoch time $1 as "MmSSs".
gantry_elapsed() {
  local s=$(( $(date +%s) - $1 ))
  printf '%dm%02ds' $(( s / 60 )) $(( s % 60 ))
}
