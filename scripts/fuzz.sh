#!/usr/bin/env bash
# Runs every fuzz target of the main module for $FUZZTIME each (default 30s),
# with the invariant checks on (-tags invariants), as make test runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
for pkg in $($GO list ./...); do
  for target in $($GO test -tags invariants -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== $pkg $target ($FUZZTIME, -tags invariants)"
    $GO test -tags invariants -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"
  done
done
