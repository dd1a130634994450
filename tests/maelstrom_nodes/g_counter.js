#!/usr/bin/env node
// Maelstrom g-counter and pn-counter in JavaScript: a state-based CRDT. Each node counts its
// own increments and decrements apart and gossips both maps to every other node every
// 100 ms; maps merge by maximum, a read is the increments' sum less the decrements'.
"use strict";
const readline = require("readline");
let me = "";
let peers = [];
let nextId = 0;
const inc = {};
const dec = {};
function send(dest, body) {
  process.stdout.write(JSON.stringify({ src: me, dest, body }) + "\n");
}
function sum(m) {
  return Object.values(m).reduce((a, b) => a + b, 0);
}
function merge(into, from) {
  for (const [n, c] of Object.entries(from)) into[n] = Math.max(into[n] || 0, c);
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
      inc[me] = 0;
      dec[me] = 0;
      reply({ type: "init_ok" });
      setInterval(() => peers.forEach((p) => send(p, { type: "state", inc, dec })), 100);
      break;
    case "add":
      if (body.delta >= 0) inc[me] += body.delta;
      else dec[me] -= body.delta;
      reply({ type: "add_ok" });
      break;
    case "read":
      reply({ type: "read_ok", value: sum(inc) - sum(dec) });
      break;
    case "state":
      merge(inc, body.inc);
      merge(dec, body.dec);
      break;
    default:
      if (body.msg_id !== undefined) reply({ type: "error", code: 10, text: "not supported" });
  }
});
