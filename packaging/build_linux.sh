#!/usr/bin/env bash
# The Linux desktop bundle: `bash packaging/build_linux.sh OUT` makes
#   OUT/llm-studio                  the launcher: run it (no argument: the window)
#   OUT/opencl-llm-studio/          PyInstaller's one-folder build: Python, Qt, numpy, pyopencl
#                                   with its ICD loader and PoCL's CPU device, the kernels, corpora
#   OUT/opencl-llm-studio.desktop   the menu entry (Exec names OUT/llm-studio), and its icon
#   OUT/BUILD-INFO.txt              version, size, build time
# It builds in a clean virtual environment of the newest releases (as a new user's pip gets),
# under $LLM_STUDIO_BUNDLE_BUILD (default ~/.cache/opencl-llm-studio/bundle-build); it needs
# python3 with venv and pip, and the package registry. Why PyInstaller: packaging/README.md.
set -euo pipefail
OUT=$(realpath -m "${1:?usage: bash packaging/build_linux.sh OUT}")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${LLM_STUDIO_BUNDLE_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/opencl-llm-studio/bundle-build}
PYTHON=${PYTHON:-python3}
start=$(date +%s)

rm -rf "$BUILD/venv" "$BUILD/work"
mkdir -p "$BUILD" "$OUT"
"$PYTHON" -m venv "$BUILD/venv"
PIP=("$BUILD/venv/bin/python" -m pip -q --disable-pip-version-check)
"${PIP[@]}" install --upgrade pip
# The app and the parts of its [hf] extra that open models and Hugging Face folders need
# (transformers and torch stay out: only the torchrun script, run elsewhere, imports them).
"${PIP[@]}" install "$ROOT" safetensors tokenizers jinja2 pyinstaller

rm -rf "$OUT/opencl-llm-studio"
"$BUILD/venv/bin/pyinstaller" --noconfirm --log-level WARN --distpath "$OUT" \
    --workpath "$BUILD/work" "$HERE/llm-studio.spec"

# PoCL links each compiled kernel with `ld`: the bundle brings GNU ld and the libraries it
# loads (packaging/ld-wrapper.sh says why no C runtime is needed), so a machine without a C
# toolchain runs kernels too.
TOOLS="$OUT/opencl-llm-studio/_internal/toolchain"
LD=$(command -v ld.bfd || command -v ld) || { echo "build_linux.sh needs GNU ld (binutils)" >&2; exit 2; }
mkdir -p "$TOOLS/bin" "$TOOLS/lib"
cp "$(readlink -f "$LD")" "$TOOLS/lib/ld.bfd"
ldd "$LD" | awk '/=> \// {print $3}' | grep -vE '/lib(c|m|dl|pthread|rt)\.so' | while read -r lib; do
    cp -L "$lib" "$TOOLS/lib/"
done
install -m 755 "$HERE/ld-wrapper.sh" "$TOOLS/bin/ld"

cat > "$OUT/llm-studio" <<'LAUNCH'
#!/bin/sh
# OpenCL LLM Studio: runs the bundle beside this file (works from an empty environment, env -i).
here=$(dirname "$(readlink -f "$0")")
PATH="$here/opencl-llm-studio/_internal/toolchain/bin:${PATH:-/usr/local/bin:/usr/bin:/bin}"
export PATH
if [ -z "${HOME:-}" ]; then HOME=$(getent passwd "$(id -u)" | cut -d: -f6); export HOME; fi
if [ -z "${LANG:-}${LC_ALL:-}" ]; then LANG=C.UTF-8; export LANG; fi   # Qt wants a UTF-8 locale
exec "$here/opencl-llm-studio/llm-studio" "$@"
LAUNCH
chmod +x "$OUT/llm-studio"
cp "$ROOT/opencl_llm_studio/resources/icon.png" "$OUT/opencl-llm-studio.png"
sed -e "s|@EXEC@|$OUT/llm-studio|" -e "s|@ICON@|$OUT/opencl-llm-studio.png|" \
    "$HERE/opencl-llm-studio.desktop.in" > "$OUT/opencl-llm-studio.desktop"

size=$(du -sh "$OUT/opencl-llm-studio" | cut -f1)
seconds=$(( $(date +%s) - start ))
version=$("$OUT/llm-studio" --version)
printf '%s\nsize: %s (du -sh opencl-llm-studio)\nbuilt: %s in %d s on %d cores\n' \
    "$version" "$size" "$(date -u +%Y-%m-%dT%H:%MZ)" "$seconds" "$(nproc)" | tee "$OUT/BUILD-INFO.txt"
echo "Run: $OUT/llm-studio   (menu entry: cp $OUT/opencl-llm-studio.desktop ~/.local/share/applications/)"
