#!/usr/bin/env bash
# Create the virtualenv (default .venv) with Python 3.11–3.13 unless it already exists.
# Installs the interpreter or its venv module with apt-get when they are missing.
set -euo pipefail

venv="${1:-.venv}"
here="$(cd "$(dirname "$0")" && pwd)"
supported='import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 14))'

if [ -x "$venv/bin/python" ]; then
    if "$venv/bin/python" -c "$supported"; then
        exit 0
    fi
    echo "$venv uses $("$venv/bin/python" --version 2>&1); PromptManager needs 3.11–3.13." >&2
    echo "Remove $venv and run make again." >&2
    exit 1
fi

find_python() {
    local candidate
    for candidate in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "$supported" 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

if ! python="$(find_python)"; then
    "$here/apt-install.sh" python3 python3-venv
    # Older releases (Ubuntu 22.04) ship 3.10 as python3 and 3.11 as an extra package.
    python="$(find_python)" || { "$here/apt-install.sh" python3.11 python3.11-venv && python="$(find_python)"; }
fi

# Debian and Ubuntu split ensurepip (which venv needs) into the pythonX.Y-venv package.
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    version="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    "$here/apt-install.sh" "python${version}-venv"
fi

echo "Creating $venv with $("$python" --version 2>&1)" >&2
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
