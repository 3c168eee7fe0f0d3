#!/usr/bin/env bash
# Install Debian's chromium for the browser tests unless it is already there.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"

if [ -x "$chromium" ]; then
    exit 0
fi
# Debian's package; the browser tests drive it through Playwright (CHROMIUM_PATH overrides).
"$here/apt-install.sh" chromium
if [ ! -x "$chromium" ]; then
    echo "chromium was installed but $chromium is missing; set CHROMIUM_PATH" >&2
    exit 1
fi
