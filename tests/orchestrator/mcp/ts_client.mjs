// A client skillog did not write: the official TypeScript SDK (pinned in .ci/npm) drives
// `skillog mcp serve` and prints what it saw as one JSON document on stdout.
//
//   node ts_client.mjs NODE_MODULES stdio '<json [command, ...args]>' ANSWERS
//   node ts_client.mjs NODE_MODULES http URL ANSWERS
//
// ANSWERS: the answers to the server's elicitation requests, in order, comma-separated
// (accept, decline, cancel).
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [modules, mode, target, answersArg] = process.argv.slice(2);
const sdk = (p) => import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const types = await sdk("types.js");

const answers = (answersArg || "").split(",").filter(Boolean);
const out = {
  elicitations: [],
  listChanged: { tools: 0, resources: 0 },
  refreshed: { tools: [], resources: [] },
};
// The SDK's list_changed auto-refresh: on each notification it lists again by itself
// and hands the new list over (the handlers replace any set by hand).
const refresh = (kind, name) => ({
  autoRefresh: true,
  debounceMs: 0,
  onChanged: (error, items) => {
    out.listChanged[kind] += 1;
    out.refreshed[kind].push(error ? `error: ${error.message}` : items.map(name));
  },
});
const client = new Client(
  { name: "ts-client", version: "1.0.0" },
  {
    capabilities: { elicitation: { form: {} } },
    listChanged: {
      tools: refresh("tools", (t) => t.name),
      resources: refresh("resources", (r) => r.uri),
    },
  },
);
client.setRequestHandler(types.ElicitRequestSchema, async (request) => {
  const action = answers.shift() || "decline";
  out.elicitations.push({ message: request.params.message, action });
  return action === "accept" ? { action, content: { approve: true } } : { action };
});

let transport;
if (mode === "stdio") {
  const { StdioClientTransport } = await sdk("client/stdio.js");
  const [command, ...args] = JSON.parse(target);
  transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
} else {
  const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
  transport = new StreamableHTTPClientTransport(new URL(target));
}
await client.connect(transport);
out.server = client.getServerVersion();
out.capabilities = client.getServerCapabilities();
out.tools = (await client.listTools()).tools.map((t) => t.name);
out.resources = (await client.listResources()).resources.map((r) => r.uri);
out.templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);

const text = (result) => result.content.map((c) => c.text).join("\n");
out.load = text(await client.callTool({ name: "skills.load", arguments: { names: ["report"] } }));
out.resourcesAfterLoad = (await client.listResources()).resources.map((r) => r.uri);
out.read = text(
  await client.callTool({ name: "skills.read", arguments: { path: "references/format.md" } }),
);
const resource = await client.readResource({ uri: "skill://report/references/format.md" });
out.resourceText = resource.contents[0].text;
// parallel calls over one connection
out.parallel = (
  await Promise.all(
    [1, 2, 3].map(() =>
      client.callTool({ name: "skills.read", arguments: { path: "references/format.md" } }),
    ),
  )
).map(text);
// each script run asks for an approval (elicitation): the answers decide
out.runs = [];
for (let i = 0; i < (answersArg || "").split(",").filter(Boolean).length; i++) {
  const result = await client.callTool({
    name: "skills.run_script",
    arguments: { path: "scripts/count.py", args: [`run${i}`] },
  });
  out.runs.push({ isError: result.isError === true, text: text(result) });
}
// the refreshes run on their own: wait for them, then compare with a listing now
for (let i = 0; i < 100 && !(out.refreshed.tools.length && out.refreshed.resources.length); i++) {
  await new Promise((resolve) => setTimeout(resolve, 50));
}
out.toolsNow = (await client.listTools()).tools.map((t) => t.name);
out.resourcesNow = (await client.listResources()).resources.map((r) => r.uri);
if (mode === "http") {
  await transport.terminateSession(); // DELETE: the session ends
  out.terminated = true;
}
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
