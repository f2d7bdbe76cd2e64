#!/usr/bin/env bash
# Debian packages the test suite needs on a clean machine, installed only when missing:
#   chromium    the browser test (tests/test_web.py) runs the web sample in headless Chromium;
#   qemu-user   tests/test_int8_portable.py runs int8 artifacts on an emulated CPU without AVX-512/VNNI;
#   openjdk-17-jre-headless   kotlinc and the Android sample's JVM contract test (tests/test_android_contract.py).
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v qemu-x86_64 >/dev/null || missing+=(qemu-user)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
