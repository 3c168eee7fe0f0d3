#!/usr/bin/env bash
# Make sure Claude Code's sandbox can run: on Linux it needs bubblewrap (bwrap) and socat.
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
if [ "${#missing[@]}" -gt 0 ]; then
    "$here/apt-install.sh" "${missing[@]}"
fi
