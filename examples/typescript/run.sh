#!/usr/bin/env bash
# Type-check and run the TypeScript examples (needs `npm ci` in clients/typescript first):
# tsc checks them against the client's generated types, esbuild bundles each for Node.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../../clients/typescript/node_modules/.bin"
"$bin/tsc" -p "$here/tsconfig.json"
out="$(mktemp -d)"
for example in "$here"/*.ts; do
  name="$(basename "$example" .ts)"
  "$bin/esbuild" "$example" --bundle --platform=node --format=esm --target=node20 \
    --log-level=warning --outfile="$out/$name.mjs"
  echo "-- $name"
  node "$out/$name.mjs"
done
rm -rf "$out"
