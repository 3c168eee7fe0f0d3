#!/usr/bin/env bash
# Make sure Redis is usable.
#   ensure-redis.sh            a Redis answers at REDIS_URL (starts a local one if not)
#   ensure-redis.sh --binary   only make sure redis-server is installed (the tests start their own)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
url="${REDIS_URL:-redis://127.0.0.1:6379/0}"

install_redis() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        "$here/apt-install.sh" redis-server
    fi
}

if [ "${1:-}" = "--binary" ]; then
    install_redis
    exit 0
fi

ping() {
    command -v redis-cli >/dev/null 2>&1 && [ "$(redis-cli -u "$url" ping 2>/dev/null)" = "PONG" ]
}

if ping; then
    exit 0
fi

install_redis
if ping; then
    exit 0
fi

# Only a local default URL can be started here; a remote Redis must already be running.
case "$url" in
    redis://127.0.0.1:6379* | redis://localhost:6379*) ;;
    *)
        echo "No Redis answers at $url; start it, or unset REDIS_URL to use a local one." >&2
        exit 1
        ;;
esac

echo "Starting a local redis-server on 127.0.0.1:6379" >&2
redis-server --daemonize yes --port 6379 --bind 127.0.0.1 --save "" --appendonly no >/dev/null
for _ in $(seq 50); do
    if ping; then
        exit 0
    fi
    sleep 0.1
done
echo "redis-server did not answer at $url" >&2
exit 1
