// The type-drift check: regenerate src/schema.ts from the live /openapi.json and compare.
// A difference means the service's contract changed and `npm run generate` was not run
// (or the generated file was edited by hand). ASR_OPENAPI_URL names the live document.
// It also checks the version policy: the package's major.minor is the API's (`info.version`).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const url = process.env.ASR_OPENAPI_URL ?? "http://127.0.0.1:8000/openapi.json";
const fresh = join(mkdtempSync(join(tmpdir(), "asr-types-")), "schema.ts");
execFileSync(
  "node_modules/.bin/openapi-typescript",
  [url, "--default-non-nullable", "false", "-o", fresh],
  { stdio: ["ignore", "ignore", "inherit"] },
);
const want = readFileSync(fresh, "utf8");
const have = readFileSync("src/schema.ts", "utf8");
if (want !== have) {
  const a = have.split("\n");
  const b = want.split("\n");
  const line = a.findIndex((text, i) => text !== b[i]);
  console.error(`src/schema.ts differs from ${url} from line ${line + 1}:`);
  console.error(`  committed: ${a[line]}\n  live:      ${b[line]}`);
  console.error("run `npm run generate` against a server of this commit and commit the result");
  process.exit(1);
}
console.log(`src/schema.ts matches ${url}`);

const api = (await (await fetch(url)).json()).info.version;
const { version } = JSON.parse(readFileSync("package.json", "utf8"));
const minor = (v) => v.split(".").slice(0, 2).join(".");
if (minor(version) !== minor(api)) {
  console.error(`package.json version ${version}: its major.minor must be the API version's (${api})`);
  process.exit(1);
}
console.log(`version ${version} follows API version ${api}`);
