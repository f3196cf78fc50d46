# shellcheck shell=bash
# Sourced by setup.sh. pip says "WARNING: Location '<url>' is ignored: it is neither a file nor
# a directory." once per package and per index folder of the host's pip configuration that does
# not exist (204 lines in a fresh set-up on a host with two such folders). These lines are
# counted and stand as one line; every other line passes as it came, errors included.
# pip_locations NOTE: a filter (stdin to stdout); at the end writes "<count> <first url>" to NOTE.
pip_locations() {
  awk -v note="$1" '
    /^WARNING: Location .* is ignored: it is neither a file nor a directory\.$/ {
      if (!n++) first = $3
      next
    }
    { print; fflush() }
    END { print n + 0, first > note }'
}
# pip_locations_said NOTE: the one line for them, when pip said any.
pip_locations_said() {
  local n first
  read -r n first < "$1" || return 0
  [ "${n:-0}" -gt 0 ] || return 0
  echo "setup: $n pip warnings left out: index locations of this host's pip configuration" \
    "that are neither a file nor a directory (the first: $first; pip config list shows them)"
}
