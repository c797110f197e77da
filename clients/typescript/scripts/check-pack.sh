#!/usr/bin/env bash
# The npm release artifact as an app gets it: `npm pack` (its `prepare` script builds dist/),
# the tarball installed into a scratch project (its one runtime dependency, eventsource-parser,
# from the registry), an import from it type-checked by `tsc --strict` with the package's own
# .d.ts files checked too (skipLibCheck off), then loaded by Node.
#   bash scripts/check-pack.sh [DIR]    # DIR: where the tarball goes (default: a temp dir)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
cd "$here"
npm pack --silent --pack-destination "$out" >/dev/null
tarball="$(ls -t "$out"/asr-client-*.tgz | head -n 1)"
listing="$(tar -tzf "$tarball")"
for want in package/dist/index.js package/dist/index.d.ts package/dist/sse.d.ts \
  package/dist/copilotkit.js package/dist/copilotkit.d.ts \
  package/dist/browser/asr-client.js package/README.md package/CHANGELOG.md; do
  grep -qx "$want" <<<"$listing" || { echo "missing from $tarball: $want" >&2; exit 1; }
done
if grep -q '^package/test/' <<<"$listing"; then echo "tests packed in $tarball" >&2; exit 1; fi

app="$(mktemp -d)"
cd "$app"
echo '{ "name": "scratch-app", "private": true, "type": "module" }' > package.json
npm install --no-audit --no-fund --loglevel=error "$tarball"
cat > tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
    "lib": ["ES2022", "DOM", "DOM.Iterable"], "types": [], "strict": true,
    "noEmit": true, "skipLibCheck": false
  },
  "files": ["main.ts"]
}
JSON
cat > main.ts <<'TS'
import { AsrClient, ApiError, type Frame, isEventFrame } from "asr-client";

const asr = new AsrClient({ baseUrl: "http://127.0.0.1:8000", apiKey: "asr_..." });

export async function stopReason(sessionId: string): Promise<string | null> {
  let text = "";
  for await (const frame of asr.streamRun(sessionId, { input: "hello" })) {
    if (frame.event === "delta") text += frame.data.text ?? "";
    if (frame.event === "RUN_FINISHED") return frame.data.payload.stop_reason;
  }
  return text;
}

export const seqOf = (frame: Frame): number | null => (isEventFrame(frame) ? frame.data.seq : null);
export const isProblem = (error: unknown): boolean => error instanceof ApiError;
TS
"$here/node_modules/.bin/tsc" -p tsconfig.json
node --input-type=module -e '
  const { AsrClient, readFrames } = await import("asr-client");
  if (typeof AsrClient !== "function" || typeof readFrames !== "function") process.exit(1);'
echo "$(basename "$tarball"): packed, installed into a scratch project, type-checked, imported"
rm -rf "$app"
