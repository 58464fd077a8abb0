#!/usr/bin/env bash
# Runs every fuzz target of the main module for $FUZZTIME each (default 30s).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
for pkg in $($GO list ./...); do
  for target in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== $pkg $target ($FUZZTIME)"
    $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"
  done
done
