#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium for the browser tests (web/e2e), once.
# Idempotent: does nothing when /usr/bin/chromium (or $CHROMIUM_PATH) already runs.
# playwright-core drives this browser; nothing is downloaded outside the Debian archive.
set -euo pipefail

CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"

if [ -x "$CHROMIUM" ] && "$CHROMIUM" --version >/dev/null 2>&1; then
  echo "install-chromium: $("$CHROMIUM" --version 2>/dev/null) is already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-chromium: need root (or sudo) to apt-get install chromium" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-chromium: installing Debian's chromium package"
$SUDO apt-get update -qq
# fonts-dejavu-core: readable monospace and unicode glyphs in screenshots.
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null

if ! "$CHROMIUM" --version >/dev/null 2>&1; then
  echo "install-chromium: $CHROMIUM does not run after the install" >&2
  exit 1
fi
echo "install-chromium: $("$CHROMIUM" --version 2>/dev/null) installed"
