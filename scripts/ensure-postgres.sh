#!/usr/bin/env bash
# Make sure a PostgreSQL database the tests can use answers (make test's PostgreSQL pass).
#   ensure-postgres.sh [URL]   default postgres://promptmanager:promptmanager@127.0.0.1:5432/promptmanager
# The URL's role must log in over TCP and may create databases (pytest-django creates
# test_<name>_… for each run and drops it after). For a local URL (127.0.0.1 or localhost)
# this installs Debian's postgresql when missing, starts its cluster when stopped, and
# creates the role (LOGIN CREATEDB, the URL's password) and database as the postgres
# superuser over the local socket (peer or trust). A password works whether 127.0.0.1 is
# trust or Debian's default scram-sha-256. A remote database must already be set up.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
url="${1:-postgres://promptmanager:promptmanager@127.0.0.1:5432/promptmanager}"
export PGCONNECT_TIMEOUT=5

pattern='^postgres(ql)?://([^:@/]+):([^@/]*)@([^:/@]+):([0-9]+)/([^/?]+)$'
if ! [[ $url =~ $pattern ]]; then
    echo "ensure-postgres.sh wants a URL of the form postgres://USER:PASSWORD@HOST:PORT/DATABASE" >&2
    exit 2
fi
user="${BASH_REMATCH[2]}"
password="${BASH_REMATCH[3]}"
host="${BASH_REMATCH[4]}"
port="${BASH_REMATCH[5]}"
database="${BASH_REMATCH[6]}"
# For messages: the URL without its password.
where="postgres://$user@$host:$port/$database"

ready() {
    command -v psql >/dev/null 2>&1 &&
        [ "$(psql "$url" -XAtqc 'select rolcreatedb or rolsuper from pg_roles where rolname = current_user' 2>/dev/null)" = "t" ]
}

if ready; then
    exit 0
fi

# Only a local cluster can be installed, started and given a role here.
case "$host" in
    127.0.0.1 | localhost) ;;
    *)
        echo "No usable PostgreSQL at $where (the role must log in and have CREATEDB); set it up there." >&2
        exit 1
        ;;
esac

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi

if ! command -v psql >/dev/null 2>&1 || ! command -v pg_ctlcluster >/dev/null 2>&1; then
    "$here/apt-install.sh" postgresql
fi

# Start the cluster on this port when it is down (postgresql's package may not start it in a
# container), or make one when there is none at all. systemd may not run here: no redirect.
found=""
while read -r version name cluster_port status _; do
    [ "$cluster_port" = "$port" ] || continue
    found="$version/$name"
    case "$status" in
        online*) ;;
        *)
            echo "Starting PostgreSQL cluster $version/$name on port $port" >&2
            "${sudo[@]}" pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start
            ;;
    esac
done < <(pg_lsclusters -h)
if [ -z "$found" ]; then
    if [ -n "$(pg_lsclusters -h)" ]; then
        echo "No PostgreSQL cluster on port $port (pg_lsclusters lists others); use its port in the URL." >&2
        exit 1
    fi
    version="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
    echo "Creating PostgreSQL cluster $version/main on port $port" >&2
    "${sudo[@]}" pg_createcluster --port "$port" "$version" main
    "${sudo[@]}" pg_ctlcluster --skip-systemctl-redirect "$version" main start
fi
for _ in $(seq 100); do
    if pg_isready -q -h "$host" -p "$port"; then
        break
    fi
    sleep 0.1
done

# As the postgres superuser over the local socket; from / so that psql can read its cwd.
admin() {
    local as=(runuser -u postgres --)
    if [ "$(id -u)" -ne 0 ]; then
        as=(sudo -u postgres)
    fi
    (cd / && "${as[@]}" psql -XAtq -v ON_ERROR_STOP=1 -p "$port" -d postgres "$@")
}

# psql quotes the names (:"…") and the password (:'…') itself.
if [ -n "$(admin -v name="$user" <<<"select 1 from pg_roles where rolname = :'name'")" ]; then
    verb=ALTER
else
    verb=CREATE
    echo "Creating PostgreSQL role $user" >&2
fi
admin -v name="$user" -v password="$password" <<<"$verb ROLE :\"name\" LOGIN CREATEDB PASSWORD :'password'"
if [ -z "$(admin -v name="$database" <<<"select 1 from pg_database where datname = :'name'")" ]; then
    echo "Creating PostgreSQL database $database" >&2
    admin -v name="$database" -v owner="$user" <<<"CREATE DATABASE :\"name\" OWNER :\"owner\""
fi

if ready; then
    exit 0
fi
echo "PostgreSQL still refuses $where; check pg_hba.conf for host connections from $host." >&2
exit 1
