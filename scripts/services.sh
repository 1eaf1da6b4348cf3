#!/usr/bin/env bash
# Start the servers of the PostgreSQL(+pgvector) and Redis back ends (`make services`).
#
# Usage: scripts/services.sh [start|stop|status|env]
#   start   (default) install what is missing, then start both servers; idempotent
#   stop    stop both servers (their data stays)
#   status  exit 0 when both answer
#   env     print the connection URLs (what .services.env holds)
#
# As root on Debian 12: apt-get installs postgresql-15, its server headers and
# redis-server from Debian's packages; pgvector is built from Debian trixie's
# source package (bookworm ships none new enough) with OPTFLAGS="" so the
# binary runs on any x86-64, not only on the CPU that built it.  Debian's
# policy-rc.d keeps the system services from starting (and we do not want
# them): both servers run as the unprivileged user $CTXRELAY_SERVICES_USER on
# private loopback ports, with their data under $CTXRELAY_SERVICES_DIR, which
# that user owns (not under /root, which it cannot enter).
#
# Writes the URLs to .services.env in the project root; the tests read it
# (tests/storage/services.py).  Without root, only an already-installed set
# of servers can be started.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

svc_dir=${CTXRELAY_SERVICES_DIR:-/var/lib/ctxrelay-services}
svc_user=${CTXRELAY_SERVICES_USER:-ctxrelay}
pg_port=${CTXRELAY_PG_PORT:-55432}
redis_port=${CTXRELAY_REDIS_PORT:-56379}
pg_version=15
pg_bin=/usr/lib/postgresql/$pg_version/bin
pgvector_source_package=pgvector
env_file=$root/.services.env
db=ctxrelay

log() { printf 'services: %s\n' "$*" >&2; }

as_user() {
    # Run "$@" as the service user (we are root) or as ourselves (we are that user).
    if [ "$(id -u)" -eq 0 ]; then runuser -u "$svc_user" -- "$@"; else "$@"; fi
}

pg_url="postgresql://$svc_user@127.0.0.1:$pg_port/$db"
redis_url="redis://127.0.0.1:$redis_port/0"

write_env() {
    printf 'CTXRELAY_TEST_PG=%s\nCTXRELAY_TEST_REDIS=%s\n' "$pg_url" "$redis_url" > "$env_file"
}

pg_up() { "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null)" = PONG ]; }
have_pgvector() { [ -f "$($pg_bin/pg_config --sharedir 2>/dev/null)/extension/vector.control" ]; }

install_packages() {
    local missing=() p
    for p in postgresql-$pg_version postgresql-server-dev-$pg_version redis-server redis-tools; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    # pgvector's build needs a C compiler and make (any that are there will do).
    command -v gcc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || missing+=(build-essential)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        log "need root to apt-get install ${missing[*]}; run 'sudo make services'"; exit 1
    fi
    log "installing ${missing[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

build_pgvector() {
    have_pgvector && return 0
    [ "$(id -u)" -eq 0 ] || { log "need root to install pgvector; run 'sudo make services'"; exit 1; }
    local work=$svc_dir/build/pgvector tarball apt_dir mirror f
    mkdir -p "$work"
    tarball=$(ls "$work"/${pgvector_source_package}_*.orig.tar.* 2>/dev/null | sort -V | tail -n1 || true)
    if [ -z "$tarball" ]; then
        # A private apt configuration whose deb-src entry reuses the mirror this
        # machine already uses (as scripts/setup-swipl.sh does); the system's
        # sources are left untouched.
        apt_dir="$work/apt"
        mkdir -p "$apt_dir/lists/partial" "$apt_dir/parts"
        mirror=""
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            mirror=$(awk '/^URIs:/{print $2; exit}' "$f"); [ -n "$mirror" ] && break
        done
        if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
            mirror=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
        fi
        [ -n "$mirror" ] || { log "no Debian mirror found in the apt configuration"; exit 1; }
        printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
            "$mirror" /usr/share/keyrings/debian-archive-keyring.gpg > "$apt_dir/parts/ctxrelay-src.sources"
        local apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/parts"
                        -o "Dir::State::Lists=$apt_dir/lists")
        log "fetching $pgvector_source_package source from $mirror (trixie)"
        apt-get "${apt_opts[@]}" update -qq >&2
        (cd "$work" && apt-get "${apt_opts[@]}" source -d "$pgvector_source_package" >&2) || true
        tarball=$(ls "$work"/${pgvector_source_package}_*.orig.tar.* 2>/dev/null | sort -V | tail -n1 || true)
        [ -n "$tarball" ] || { log "could not fetch the $pgvector_source_package source tarball"; exit 1; }
    fi
    rm -rf "$work/src"; mkdir -p "$work/src"
    tar xf "$tarball" -C "$work/src" --strip-components=1
    log "building pgvector from $(basename "$tarball")"
    # OPTFLAGS="": no -march=native, so the library runs on any x86-64.
    make -C "$work/src" USE_PGXS=1 PG_CONFIG="$pg_bin/pg_config" OPTFLAGS="" \
        > "$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; exit 1; }
    make -C "$work/src" USE_PGXS=1 PG_CONFIG="$pg_bin/pg_config" OPTFLAGS="" install \
        >> "$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; exit 1; }
    rm -rf "$work/src"
}

prepare_dir() {
    if [ "$(id -u)" -eq 0 ]; then
        id -u "$svc_user" >/dev/null 2>&1 || useradd --system --home-dir "$svc_dir" \
            --shell /usr/sbin/nologin "$svc_user"
        mkdir -p "$svc_dir"
        chown "$svc_user": "$svc_dir"
        chmod 0750 "$svc_dir"
    else
        mkdir -p "$svc_dir"
    fi
}

start_pg() {
    local data=$svc_dir/pg
    if ! [ -f "$data/PG_VERSION" ]; then
        log "initialising PostgreSQL in $data"
        as_user "$pg_bin/initdb" -D "$data" -U "$svc_user" --auth=trust -E UTF8 \
            --locale=C.UTF-8 >/dev/null
        # Loopback only, on our own port; a socket directory the user owns.
        cat >> "$data/postgresql.conf" <<EOF
# ctxrelay services (scripts/services.sh)
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$svc_dir'
max_connections = 200
shared_buffers = 128MB
maintenance_work_mem = 256MB
EOF
    fi
    if ! pg_up; then
        log "starting PostgreSQL on 127.0.0.1:$pg_port"
        as_user "$pg_bin/pg_ctl" -D "$data" -l "$svc_dir/pg.log" -w -t 60 start >/dev/null
    fi
    as_user "$pg_bin/psql" -h 127.0.0.1 -p "$pg_port" -d postgres -qtAc \
        "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 \
        || as_user "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" "$db"
    # The back end runs CREATE EXTENSION itself; it needs the files installed only.
}

start_redis() {
    redis_up && return 0
    log "starting Redis on 127.0.0.1:$redis_port"
    # A rebuildable tier: no persistence, so a restart starts empty (by design).
    as_user redis-server --daemonize yes --bind 127.0.0.1 --port "$redis_port" \
        --dir "$svc_dir" --save '' --appendonly no --protected-mode yes \
        --pidfile "$svc_dir/redis.pid" --logfile "$svc_dir/redis.log"
    local i
    for i in $(seq 50); do redis_up && return 0; sleep 0.1; done
    log "Redis did not answer on port $redis_port; see $svc_dir/redis.log"; exit 1
}

case "${1:-start}" in
    start)
        install_packages
        build_pgvector
        prepare_dir
        start_pg
        start_redis
        write_env
        log "PostgreSQL $pg_url, Redis $redis_url (in $env_file)"
        ;;
    stop)
        pg_up && as_user "$pg_bin/pg_ctl" -D "$svc_dir/pg" -m fast -w stop >/dev/null || true
        redis_up && redis-cli -h 127.0.0.1 -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
        ;;
    status)
        pg_up && redis_up
        ;;
    env)
        printf 'CTXRELAY_TEST_PG=%s\nCTXRELAY_TEST_REDIS=%s\n' "$pg_url" "$redis_url"
        ;;
    *)
        echo "usage: $0 [start|stop|status|env]" >&2; exit 2
        ;;
esac
