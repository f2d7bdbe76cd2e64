#!/usr/bin/env bash
# Debian packages the test suite needs on a clean machine, installed only when missing:
#   chromium    the browser test (tests/test_web.py) runs the web sample in headless Chromium;
#   qemu-user   tests/test_int8_portable.py runs int8 artifacts on an emulated CPU without AVX-512/VNNI;
#   openjdk-17-jre-headless, junit4   kotlinc, and the Android sample's core on the JVM: its contract test and
#               its JUnit tests (tests/test_android_contract.py).
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v qemu-x86_64 >/dev/null || missing+=(qemu-user)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
[ -f /usr/share/java/junit4.jar ] || missing+=(junit4)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
