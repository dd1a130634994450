#!/usr/bin/env node
// Maelstrom g-counter in JavaScript: a state-based CRDT. Each node counts its own adds and
// gossips its whole map to every other node every 100 ms; maps merge by maximum.
"use strict";
const readline = require("readline");
let me = "";
let peers = [];
let nextId = 0;
const counts = {};
function send(dest, body) {
  process.stdout.write(JSON.stringify({ src: me, dest, body }) + "\n");
}
function total() {
  return Object.values(counts).reduce((a, b) => a + b, 0);
}
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  const msg = JSON.parse(line);
  const body = msg.body;
  const reply = (b) => send(msg.src, Object.assign(b, { msg_id: ++nextId, in_reply_to: body.msg_id }));
  switch (body.type) {
    case "init":
      me = body.node_id;
      peers = body.node_ids.filter((n) => n !== me);
      counts[me] = 0;
      reply({ type: "init_ok" });
      setInterval(() => peers.forEach((p) => send(p, { type: "state", counts })), 100);
      break;
    case "add":
      counts[me] += body.delta;
      reply({ type: "add_ok" });
      break;
    case "read":
      reply({ type: "read_ok", value: total() });
      break;
    case "state":
      for (const [n, c] of Object.entries(body.counts)) counts[n] = Math.max(counts[n] || 0, c);
      break;
    default:
      if (body.msg_id !== undefined) reply({ type: "error", code: 10, text: "not supported" });
  }
});
