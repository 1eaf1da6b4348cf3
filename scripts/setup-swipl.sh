#!/usr/bin/env bash
# Provide SWI-Prolog >= 9.1.12 with library(janus) embedding the project's Python.
#
# Usage: scripts/setup-swipl.sh PREFIX PYTHON
#   PREFIX  where a locally built SWI-Prolog goes (e.g. .deps/swipl)
#   PYTHON  the interpreter janus must embed (the base interpreter of .venv)
#
# Prints nothing on success but the path of the swipl binary chosen, on the
# last line. Idempotent: a finished build (stamp file) is reused.
set -euo pipefail

prefix=$(realpath -m "$1")
python=$2
want_version=90112              # 9.1.12: first release whose janus we rely on
swipl_source_package=swi-prolog
swipl_series=9.2

log() { printf 'setup-swipl: %s\n' "$*" >&2; }

janus_embeds_python() {
    # True when $1 loads library(janus) and its embedded Python is $python's.
    local swipl=$1 want got
    want=$("$python" -c 'import sys; print(sys.version.replace("\n", " ") + "|" + sys.base_prefix)')
    got=$("$swipl" -g 'py_call(sys:version, V), py_call(sys:base_prefix, P), split_string(V, "\n", "", Ps), atomic_list_concat(Ps, " ", V1), format("~w|~w~n", [V1, P])' -t halt 2>/dev/null | tail -n1) || return 1
    [ "$got" = "$want" ]
}

new_enough() {
    local v
    v=$("$1" --dump-runtime-variables 2>/dev/null | sed -n 's/^PLVERSION="\([0-9]*\)".*/\1/p')
    [ -n "$v" ] && [ "$v" -ge "$want_version" ]
}

# 1. A finished local build.
if [ -x "$prefix/bin/swipl" ] && [ -f "$prefix/.ctxrelay-built" ] && janus_embeds_python "$prefix/bin/swipl"; then
    echo "$prefix/bin/swipl"; exit 0
fi

# 2. A swipl on PATH that is new enough and embeds the same Python.
if command -v swipl >/dev/null 2>&1; then
    sys_swipl=$(command -v swipl)
    if new_enough "$sys_swipl" && janus_embeds_python "$sys_swipl"; then
        log "using $sys_swipl"
        echo "$sys_swipl"; exit 0
    fi
    log "$sys_swipl is too old or its janus embeds another Python; building $swipl_series.x locally"
fi

# 3. Build from the upstream source tarball of Debian's swi-prolog source package.
need_pkgs=(cmake ninja-build libgmp-dev zlib1g-dev libedit-dev libncurses-dev pkg-config)
missing=()
for p in "${need_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing build dependencies: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        log "need root to apt-get install ${missing[*]}; install them and re-run"; exit 1
    fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi

work=$(realpath -m "$prefix/../swipl-src")
mkdir -p "$work"
tarball=$("$(dirname "$0")/fetch-trixie-source.sh" "$swipl_source_package" "$work" "${swipl_series}.*")

src="$work/src"
rm -rf "$src" "$work/build"
mkdir -p "$src" "$work/build"
tar xf "$tarball" -C "$src" --strip-components=1

pylibdir=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
pyexe=$("$python" -c 'import sys, os; print(os.path.realpath(sys.executable))')
log "building SWI-Prolog from $(basename "$tarball") against $pyexe"
cmake -S "$src" -B "$work/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_RPATH="$prefix/lib/swipl/lib/x86_64-linux;$pylibdir" \
    -DCMAKE_BUILD_RPATH="$pylibdir" \
    -DPython_EXECUTABLE="$pyexe" \
    -DPython_FIND_STRATEGY=LOCATION \
    -DSWIPL_PACKAGES_X=OFF -DSWIPL_PACKAGES_JAVA=OFF -DSWIPL_PACKAGES_ODBC=OFF \
    -DSWIPL_PACKAGES_BDB=OFF -DSWIPL_PACKAGES_QT=OFF -DSWIPL_PACKAGES_SSL=OFF \
    -DSWIPL_PACKAGES_ARCHIVE=OFF -DSWIPL_PACKAGES_PCRE=OFF -DSWIPL_PACKAGES_YAML=OFF \
    -DSWIPL_PACKAGES_TIPC=OFF -DSWIPL_PACKAGES_PYTHON=ON \
    -DINSTALL_DOCUMENTATION=OFF -DBUILD_TESTING=OFF -DINSTALL_TESTS=OFF \
    > "$work/cmake.log" 2>&1 || { tail -n 40 "$work/cmake.log" >&2; exit 1; }
ninja -C "$work/build" > "$work/build.log" 2>&1 || { tail -n 40 "$work/build.log" >&2; exit 1; }
ninja -C "$work/build" install > "$work/install.log" 2>&1 || { tail -n 40 "$work/install.log" >&2; exit 1; }

if ! janus_embeds_python "$prefix/bin/swipl"; then
    log "built swipl, but its janus does not embed $pyexe"; exit 1
fi
touch "$prefix/.ctxrelay-built"
rm -rf "$src" "$work/build"
echo "$prefix/bin/swipl"
