// `skillog mcp serve` as a client skillog did not write sees it: the TypeScript SDK
// (pinned in .ci/npm) times N pings and N recorded skills.read calls over stdio and
// prints their medians as JSON. Run by bench/mcp_serve_ts.py.
//
//   node bench/mcp_serve_ts.mjs NODE_MODULES N '<json [command, ...args]>'
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [modules, count, command] = process.argv.slice(2);
const sdk = (p) => import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const [cmd, ...args] = JSON.parse(command);
const client = new Client({ name: "bench", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: cmd, args, env: process.env }));
await client.callTool({ name: "skills.load", arguments: { names: ["notes"] } });

const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
async function time(fn) {
  const out = [];
  for (let i = 0; i < Number(count); i++) {
    const start = process.hrtime.bigint();
    await fn();
    out.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return median(out);
}
const read = { name: "skills.read", arguments: { path: "references/style.md" } };
await client.callTool(read); // warm
const ping = await time(() => client.ping());
const call = await time(() => client.callTool(read));
await client.close();
process.stdout.write(JSON.stringify({ ping_ms: ping, call_ms: call }) + "\n");
