#!/usr/bin/env bash
# Installs what the browser test (tests/test_web.py) needs on a clean machine: Debian's chromium and the
# pinned npm packages of samples/web (LiteRT.js + playwright-core). Idempotent and quick when already done:
# apt runs only if chromium is missing, `npm ci` only if node_modules is missing or the lock file changed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends chromium
fi

web=samples/web
stamp="$web/node_modules/.edgeport-lock-sha256"
want="$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)"
if [ ! -d "$web/node_modules" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  (cd "$web" && npm ci --no-audit --no-fund)
  echo "$want" > "$stamp"
fi
