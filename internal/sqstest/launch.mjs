// Starts fauxqs on loopback for internal/sqstest. Arguments: fauxqs' package
// directory and the port (0: any free one). Prints {"address": "http://127.0.0.1:N"}
// once it listens. (fauxqs' own CLI listens on every interface.)
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [dir, port] = process.argv.slice(2);
const { buildApp } = await import(pathToFileURL(join(dir, "dist", "app.js")).href);
const app = buildApp({ logger: false });
const address = await app.listen({ host: "127.0.0.1", port: Number(port) });
console.log(JSON.stringify({ address }));
