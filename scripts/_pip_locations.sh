# shellcheck shell=bash
# Sourced by setup.sh. pip says "WARNING: Location '<url>' is ignored: it is neither a file nor
# a directory." once per package and per index folder of the host's pip configuration that does
# not exist (204 lines in a fresh set-up on a host with two such folders). These lines are
# counted and stand as one line; every other line passes as it came, errors included.
# setuptools' BuildBackendWarning lines (the editable installs' banners) pass and are counted:
# they come on stderr, so a terminal may show them after the step they belong to.
# pip_locations NOTE: a filter (stdin to stdout); at the end writes "<count> <first url>
# <setuptools warnings>" to NOTE.
pip_locations() {
  awk -v note="$1" '
    /^WARNING: Location .* is ignored: it is neither a file nor a directory\.$/ {
      if (!n++) first = $3
      next
    }
    /BuildBackendWarning:/ { b++ }
    { print; fflush() }
    END { print n + 0, (n ? first : "-"), b + 0 > note }'
}
# pip_locations_said NOTE: one line for pip's, when it said any, and one for setuptools'.
pip_locations_said() {
  local n first b
  read -r n first b < "$1" || return 0
  if [ "${n:-0}" -gt 0 ]; then
    echo "setup: $n pip warnings left out: index locations of this host's pip configuration" \
      "that are neither a file nor a directory (the first: $first; pip config list shows them)"
  fi
  if [ "${b:-0}" -gt 0 ]; then
    echo "setup: the $b setuptools BuildBackendWarning(s) above come from the editable" \
      "installs and are expected (CONTRIBUTING.md, \"Set up\"); they print on stderr, so" \
      "possibly after a later step's lines"
  fi
}
