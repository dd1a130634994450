// A scripted session with the jolokia.js client (npm, the Jolokia project's own JavaScript
// client) against a testbed node: `node jolokia_session.mjs URL TOKEN USER PASSWORD`.
// Prints one JSON object with what each step answered; tests/test_jolokia_clients.py judges.
globalThis.window = globalThis; // the client looks for window.btoa (a browser global)
const { default: Jolokia } = await import("jolokia.js");

const [url, token, user, password] = process.argv.slice(2);
const bearer = new Jolokia({ url, headers: { Authorization: `Bearer ${token}` } });
const basic = new Jolokia({ url, username: user, password });
const anonymous = new Jolokia({ url });
const out = {};
const ask = async (client, req, opts = {}) => {
  try {
    return await client.request(req, opts);
  } catch (e) {
    return { thrown: String(e && (e.status ?? e.message ?? e)) };
  }
};
const mb = "testbed:type=Demo";

out.version = await ask(bearer, { type: "version" });
out.list = await ask(bearer, { type: "list", path: "testbed/type=Demo/attr" });
out.search = await ask(bearer, { type: "search", mbean: "testbed:type=*" });
out.readOneGet = await ask(bearer, { type: "read", mbean: mb, attribute: "Count" }, { method: "get" });
out.readOnePost = await ask(bearer, { type: "read", mbean: mb, attribute: "Count" }, { method: "post" });
out.readSeveral = await ask(bearer, { type: "read", mbean: mb, attribute: ["Count", "Name"] });
out.readAllGet = await ask(bearer, { type: "read", mbean: mb }, { method: "get" });
out.readAllPost = await ask(bearer, { type: "read", mbean: mb }, { method: "post" });
out.pattern = await ask(bearer, { type: "read", mbean: "testbed:type=*", attribute: "Count" });
out.pathGet = await ask(bearer, { type: "read", mbean: mb, attribute: "Tree", path: "a/b" }, { method: "get" });
out.write = await ask(bearer, { type: "write", mbean: mb, attribute: "Count", value: 7 }, { method: "post" });
out.afterWrite = await ask(bearer, { type: "read", mbean: mb, attribute: "Count" }, { method: "get" });
out.execGet = await ask(bearer, { type: "exec", mbean: mb, operation: "add", arguments: [2, 3] }, { method: "get" });
out.execPost = await ask(bearer, { type: "exec", mbean: mb, operation: "add", arguments: [4, 5] }, { method: "post" });
out.bulk = await ask(bearer, [
  { type: "read", mbean: mb, attribute: "Count" },
  { type: "read", mbean: "testbed:type=Nope", attribute: "Count" },
  { type: "exec", mbean: mb, operation: "add", arguments: [1, 1] },
]);
out.maxDepth = await ask(bearer, { type: "read", mbean: mb, attribute: "Tree" }, { maxDepth: 1 });
out.basic = await ask(basic, { type: "read", mbean: mb, attribute: "Count" }, { method: "get" });
out.refused = await ask(anonymous, { type: "read", mbean: mb, attribute: "Count" }, { method: "get" });
console.log(JSON.stringify(out));
