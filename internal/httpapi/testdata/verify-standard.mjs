// Verifies Standard Webhooks deliveries with other vendors' libraries: the
// official standardwebhooks package and Svix's svix. Run by the tests
// (standardwebhooks_test.go) with node:
//
//   node verify-standard.mjs <node_modules dir> <requests.json
//
// The input is a JSON array of {secret, headers, body}; the output one JSON
// array of {standardwebhooks, svix}, each "ok" or the verifier's error.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import path from "node:path";
import fs from "node:fs";

const dir = process.argv[2];
const require = createRequire(path.join(dir, "noop.js"));
const standard = require("standardwebhooks");
const svix = await import(pathToFileURL(path.join(dir, "svix", "dist", "index.mjs")).href);

function check(verify) {
	try {
		verify();
		return "ok";
	} catch (e) {
		return String(e && e.message ? e.message : e);
	}
}

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const out = input.map(({ secret, headers, body }) => ({
	standardwebhooks: check(() => new standard.Webhook(secret).verify(body, headers)),
	svix: check(() => new svix.Webhook(secret).verify(body, headers)),
}));
process.stdout.write(JSON.stringify(out));
