#!/usr/bin/env bash
# Make sure the sandbox can run: bubblewrap (bwrap), socat (the run's own sandbox passes
# its commands' network to the egress with it; Claude Code's sandbox per command needs it
# too) and util-linux's nsenter and setpriv (how each command enters the run's sandbox).
# Runs refuse to start without them unless CLAUDE_SANDBOX=off (see README).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"

# The operator turned the sandbox off: nothing to install.
case "$(printf %s "${CLAUDE_SANDBOX:-on}" | tr "[:upper:]" "[:lower:]")" in
    off | false | 0 | no) exit 0 ;;
esac
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v socat >/dev/null 2>&1 || missing+=(socat)
{ command -v nsenter && command -v setpriv; } >/dev/null 2>&1 || missing+=(util-linux)
if [ "${#missing[@]}" -gt 0 ]; then
    "$here/apt-install.sh" "${missing[@]}"
fi
