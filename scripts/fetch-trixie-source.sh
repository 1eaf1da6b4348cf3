#!/usr/bin/env bash
# Fetch the orig tarball of a Debian trixie source package; print its path.
#
# Usage: scripts/fetch-trixie-source.sh PACKAGE WORKDIR [GLOB]
#   PACKAGE  the source package (swi-prolog, pgvector)
#   WORKDIR  where the tarball goes (and the private apt state)
#   GLOB     what the tarball's version must match (default *), e.g. 9.2.*
#
# Debian 12 ships neither a new enough SWI-Prolog nor pgvector, so both are
# built from trixie's sources (scripts/setup-swipl.sh, scripts/services.sh).
# A private apt configuration whose deb-src entry reuses the mirror this
# machine already uses; the system's sources are left untouched.  A tarball
# already in WORKDIR is reused.
set -euo pipefail

package=$1
work=$2
glob=${3:-*}

log() { printf 'fetch-trixie-source: %s\n' "$*" >&2; }

found() { ls "$work"/${package}_${glob}.orig.tar.* 2>/dev/null | sort -V | tail -n1 || true; }

mkdir -p "$work"
tarball=$(found)
if [ -z "$tarball" ]; then
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
    apt_opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/parts"
              -o "Dir::State::Lists=$apt_dir/lists")
    log "fetching $package source from $mirror (trixie)"
    apt-get "${apt_opts[@]}" update -qq >&2
    # The .dsc may be missing on the mirror while the tarball arrives: judge by the tarball.
    (cd "$work" && apt-get "${apt_opts[@]}" source -d "$package" >&2) || true
    tarball=$(found)
    [ -n "$tarball" ] || { log "could not fetch the $package source tarball"; exit 1; }
fi
echo "$tarball"
