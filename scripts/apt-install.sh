#!/usr/bin/env bash
# Install Debian/Ubuntu packages non-interactively; sudo only when not already root.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 PACKAGE..." >&2
    exit 2
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "apt-get not found: please install $* with your system's package manager" >&2
    exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi

echo "Installing $* with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
