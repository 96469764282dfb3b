#!/usr/bin/env bash
# Install a Java 17 runtime for the Spark backend's tests (pyspark needs one) when `java` is missing:
# Debian's openjdk-17-jre-headless, with apt-get as root, or through sudo when not root.  Idempotent.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
  echo "java_setup: $(java -version 2>&1 | head -n 1)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "java_setup: need root (or sudo) to apt-get install openjdk-17-jre-headless" >&2
    exit 1
  fi
  SUDO="sudo"
fi
echo "java_setup: installing openjdk-17-jre-headless"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
if ! command -v java >/dev/null 2>&1; then
  echo "java_setup: java is missing after installing openjdk-17-jre-headless" >&2
  exit 1
fi
echo "java_setup: $(java -version 2>&1 | head -n 1)"
