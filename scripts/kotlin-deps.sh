#!/usr/bin/env bash
# Installs what the Android sample's JVM contract test (tests/test_android_contract.py) needs on a clean machine:
#   kotlinc          the `kotlin-compiler` npm package (the JetBrains compiler distribution; it carries the
#                    kotlinx.serialization compiler plugin in lib/);
#   serialization    kotlinx-serialization-core/json-jvm jars, unzipped from the `kotlin-jupyter-kernel` wheel
#                    (`pip download --no-deps`: nothing is installed into any Python environment);
#   a Java runtime   Debian's openjdk-17-jre-headless when there is no `java`, and junit4 (the core's JUnit tests):
#                    scripts/system-deps.sh lists them.
# Everything goes into one folder keyed by the versions below, next to the venvs
# (${EDGEPORT_VENV_ROOT:-$HOME/.cache/edgeport}/kotlin-<version>), so reruns are instant; the test keeps its
# compiled jar there too, keyed by the hash of the Kotlin sources. Prints that folder.
#
#   scripts/kotlin-deps.sh           install when missing, print the folder
#   scripts/kotlin-deps.sh --check   print the folder if it is complete, else fail with one line (installs nothing)
# PY picks the interpreter whose pip downloads the wheel (default python3).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
KOTLIN=2.4.20
SERIALIZATION=1.9.0
KERNEL_WHEEL=0.19.0.944  # kotlin-jupyter-kernel release that bundles kotlinx.serialization $SERIALIZATION
JUNIT=/usr/share/java/junit4.jar  # Debian's junit4 (4.13.2, as the Gradle build's testImplementation)
root="${EDGEPORT_VENV_ROOT:-$HOME/.cache/edgeport}/kotlin-$KOTLIN"
stamp="kotlin-compiler $KOTLIN; kotlinx-serialization $SERIALIZATION from kotlin-jupyter-kernel $KERNEL_WHEEL"

if [ "${1:-}" = "--check" ]; then
  if [ "$(cat "$root/.complete" 2>/dev/null)" = "$stamp" ] && command -v java >/dev/null && [ -f "$JUNIT" ]; then
    echo "$root"; exit 0
  fi
  echo "kotlin-deps.sh: kotlinc $KOTLIN / kotlinx.serialization $SERIALIZATION / java / junit4 not installed; run scripts/kotlin-deps.sh" >&2
  exit 1
fi

{ command -v java >/dev/null && [ -f "$JUNIT" ]; } || bash "$repo/scripts/system-deps.sh" >&2
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9  # two runs installing into the same folder at once would corrupt it
if [ "$(cat "$root/.complete" 2>/dev/null)" != "$stamp" ]; then
  echo "kotlin-deps.sh: installing kotlinc $KOTLIN and kotlinx.serialization $SERIALIZATION into $root (once)" >&2
  rm -rf "$root"
  mkdir -p "$root/jars" "$root/download"
  npm install --prefix "$root/npm" --no-audit --no-fund --no-save "kotlin-compiler@$KOTLIN" >&2
  "${PY:-python3}" -m pip download --quiet --no-deps --disable-pip-version-check \
    "kotlin-jupyter-kernel==$KERNEL_WHEEL" -d "$root/download" >&2
  "${PY:-python3}" - "$root" "$SERIALIZATION" <<'PYEOF'
import pathlib, sys, zipfile
root, version = pathlib.Path(sys.argv[1]), sys.argv[2]
wheel = zipfile.ZipFile(next((root / "download").glob("kotlin_jupyter_kernel-*.whl")))
for lib in ("core", "json"):
    name = f"kotlinx-serialization-{lib}-jvm-{version}.jar"
    (root / "jars" / name).write_bytes(wheel.read(f"run_kotlin_kernel/jars/{name}"))
PYEOF
  rm -rf "$root/download"  # 80 MB wheel: only its two small jars are used
  "$root/npm/node_modules/kotlin-compiler/bin/kotlinc" -version >&2 2>&1
  echo "$stamp" > "$root/.complete"
fi
echo "$root"
