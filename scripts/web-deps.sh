#!/usr/bin/env bash
# Installs what the browser test (tests/test_web.py) needs on a clean machine: the pinned npm packages of
# samples/web (LiteRT.js + playwright-core); Debian packages come from scripts/system-deps.sh. Idempotent and
# quick when already done: `npm ci` runs only if node_modules is missing or the lock file changed.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/system-deps.sh

web=samples/web
stamp="$web/node_modules/.edgeport-lock-sha256"
want="$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)"
if [ ! -d "$web/node_modules" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  (cd "$web" && npm ci --no-audit --no-fund)
  echo "$want" > "$stamp"
fi
