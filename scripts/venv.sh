#!/usr/bin/env bash
# Create (once per pin set) the virtualenv with every target's dependencies, then install this checkout
# into it. Prints the venv directory. The venv is keyed by a hash of the pins so reruns are instant.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
hash=$(cat "$repo/requirements.lock" "$repo/scripts/venv.sh" | sha256sum | cut -c1-16)
venv="${EDGEPORT_VENV_ROOT:-$HOME/.cache/edgeport}/venv-$hash"
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  python3.11 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --upgrade "pip>=24" >&2
  "$venv/bin/pip" install --quiet -r "$repo/requirements.lock" >&2
  touch "$venv/.complete"
fi
"$venv/bin/pip" install --quiet --no-deps --no-build-isolation -e "$repo" >&2
echo "$venv"
