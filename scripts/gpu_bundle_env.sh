# Source from the repository root on a machine without nvidia-pytriton or network, after
# scripts/pack_gpu_bundle.py packed .gpu/ (for that machine's Python) and .gpu/ was copied along:
#
#     . scripts/gpu_bundle_env.sh
#
# Installs .gpu/wheels/*.whl and unpacks .gpu/tritonserver.tar.xz and .gpu/stub-site.tar.xz into
# /tmp/site (NLG_BUNDLE_SITE overrides it), checks that the server's libraries resolve and that the
# client and the model import as they will run, and exports PYTHONPATH=/tmp/site:<repository root>,
# NLG_TRITON_HOME=/tmp/site and NLG_STUB_PYTHONPATH=/tmp/site/stub-site (numpy 1.26 for the backend
# stub, which misreads numpy 2's arrays), which triton_backend.launch reads. Safe to source again: an
# unchanged bundle is not unpacked twice. On failure it says why on stderr and returns 1 (without
# exporting anything).
# shellcheck shell=bash

if ! (return 0 2>/dev/null); then
    echo "gpu_bundle_env: source this script (. scripts/gpu_bundle_env.sh); run, it cannot export anything" >&2
    exit 1
fi

_nlg_gpu_bundle_env() {
    local repo site py stamp_want stamp_have pyver stub libdir missing lib archive stub_path
    repo=$(pwd -P)
    site=${NLG_BUNDLE_SITE:-/tmp/site}
    py=${PYTHON:-python3}
    _nlg_fail() { echo "gpu_bundle_env: ERROR: $*" >&2; }  # the caller returns 1 (also under set -e)

    [ -f "$repo/scripts/gpu_bundle_env.sh" ] || { _nlg_fail "source me from the repository root (not $repo)"; return 1; }
    for archive in tritonserver.tar.xz stub-site.tar.xz; do
        [ -f "$repo/.gpu/$archive" ] || { _nlg_fail "$repo/.gpu/$archive is missing (run scripts/pack_gpu_bundle.py)"; return 1; }
    done
    compgen -G "$repo/.gpu/wheels/*.whl" >/dev/null || { _nlg_fail "no wheels in $repo/.gpu/wheels"; return 1; }
    command -v "$py" >/dev/null || { _nlg_fail "no $py on PATH"; return 1; }
    pyver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")') || { _nlg_fail "$py does not run"; return 1; }
    echo "gpu_bundle_env: python $(command -v "$py") ($pyver), site $site"

    stamp_want=$(cd "$repo/.gpu" && ls -l --time-style=+%s tritonserver.tar.xz stub-site.tar.xz wheels/*.whl | awk '{print $5, $6, $7}')
    stamp_have=$(cat "$site/.nlg-gpu-bundle" 2>/dev/null || true)
    if [ "$stamp_want" = "$stamp_have" ] && [ -x "$site/pytriton/tritonserver/bin/tritonserver" ]; then
        echo "gpu_bundle_env: $site already holds this bundle"
    else
        mkdir -p "$site" || { _nlg_fail "cannot create $site"; return 1; }
        rm -f "$site/.nlg-gpu-bundle"
        echo "gpu_bundle_env: installing $(cd "$repo/.gpu/wheels" && echo *.whl) into $site"
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --disable-pip-version-check --target "$site" "$repo"/.gpu/wheels/*.whl \
            || { _nlg_fail "pip install of .gpu/wheels failed"; return 1; }
        rm -rf "$site/stub-site"
        for archive in tritonserver.tar.xz stub-site.tar.xz; do
            echo "gpu_bundle_env: unpacking .gpu/$archive into $site"
            tar -xJf "$repo/.gpu/$archive" -C "$site" --no-same-owner \
                || { _nlg_fail "unpacking .gpu/$archive failed"; return 1; }
        done
        printf '%s\n' "$stamp_want" >"$site/.nlg-gpu-bundle"
    fi

    stub="$site/pytriton/tritonserver/python_backend_stubs/$pyver/triton_python_backend_stub"
    [ -x "$stub" ] || { _nlg_fail "the bundle has no backend stub for Python $pyver (pack it with --python $pyver): $(ls "$site/pytriton/tritonserver/python_backend_stubs" 2>/dev/null)"; return 1; }
    # The launcher puts the interpreter's LIBDIR and the bundled libraries on the library path: the same here.
    libdir=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
    missing=""
    for lib in "$site/pytriton/tritonserver/bin/tritonserver" \
        "$site/pytriton/tritonserver/backends/python/libtriton_python.so" "$stub"; do
        missing+=$(LD_LIBRARY_PATH="$libdir:$site/nvidia_pytriton.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            ldd "$lib" 2>&1 | sed -n "/not found/s|^|$(basename "$lib"): |p")
    done
    [ -z "$missing" ] || { _nlg_fail "unresolved libraries:"$'\n'"$missing"; return 1; }
    echo "gpu_bundle_env: tritonserver, the Python backend and its Python $pyver stub resolve every library"

    # The launcher and the load generator, as they will run.
    PYTHONPATH="$site:$repo" NLG_TRITON_HOME="$site" "$py" -c '
import numpy, tritonclient.grpc, nlgsim.replay, triton_backend.launch as launch
print(f"gpu_bundle_env: client imports ok (tritonclient.grpc, nlgsim.replay; numpy {numpy.__version__}); server {launch._TRITON}/bin/tritonserver")
' || { _nlg_fail "the client or the launcher does not import (above)"; return 1; }
    # The model's imports as its stub makes them: an interpreter that ignores PYTHONPATH runs model.py,
    # which puts the PYTHONPATH the launcher gives the server first (NLG_STUB_PYTHONPATH's numpy 1.x).
    stub_path=$(PYTHONPATH="$site:$repo" NLG_TRITON_HOME="$site" NLG_STUB_PYTHONPATH="$site/stub-site" "$py" -c '
import triton_backend.launch as launch; print(launch.server_environment()["PYTHONPATH"])') \
        || { _nlg_fail "triton_backend.launch.server_environment failed (above)"; return 1; }
    PYTHONPATH="$stub_path" "$py" -E -c '
import runpy, sys
sys.path.append(sys.argv[1] + "/pytriton/tritonserver/backends/python")
runpy.run_path(sys.argv[2] + "/model_repository/gpt2/1/model.py")
import numpy, torch, triton_backend.tokenizer as tok
assert numpy.__version__.startswith("1."), f"numpy {numpy.__version__} from {numpy.__file__}: the stub needs 1.x"
assert len(tok.load_tokenizer().get_vocab()) == 50257
torch.from_numpy(numpy.arange(3)).sum().item()
print(f"gpu_bundle_env: the model imports as in its stub, under numpy {numpy.__version__} (torch {torch.__version__}, cuda {torch.cuda.is_available()})")
' "$site" "$repo" || { _nlg_fail "the model does not import as its stub will run it (above)"; return 1; }

    export PYTHONPATH="$site:$repo"
    export NLG_TRITON_HOME="$site"
    export NLG_STUB_PYTHONPATH="$site/stub-site"
    echo "gpu_bundle_env: exported PYTHONPATH=$PYTHONPATH NLG_TRITON_HOME=$NLG_TRITON_HOME NLG_STUB_PYTHONPATH=$NLG_STUB_PYTHONPATH"
}

_nlg_gpu_bundle_env
_nlg_gpu_bundle_rc=$?
unset -f _nlg_gpu_bundle_env _nlg_fail
return "$_nlg_gpu_bundle_rc"
