#!/usr/bin/env bash
# The headless browser for tests/experiments/test_ui_browser.py: Debian's chromium,
# driven by Playwright's Python package (installed with the dev extras). Playwright must
# never download a browser of its own (CI reaches only the package registries).
# Idempotent: a machine that has chromium already skips apt entirely.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  echo "setup-browser: $(/usr/bin/chromium --version 2>/dev/null || echo chromium) already installed"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
# fonts-liberation: readable text in the screenshots the test leaves behind.
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
echo "setup-browser: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
