#!/usr/bin/env node
// Maelstrom echo in JavaScript: answers every echo with the same text.
"use strict";
const readline = require("readline");
let me = "";
let nextId = 0;
function send(dest, body) {
  process.stdout.write(JSON.stringify({ src: me, dest, body }) + "\n");
}
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  const msg = JSON.parse(line);
  const body = msg.body;
  const reply = (b) => send(msg.src, Object.assign(b, { msg_id: ++nextId, in_reply_to: body.msg_id }));
  if (body.type === "init") {
    me = body.node_id;
    reply({ type: "init_ok" });
  } else if (body.type === "echo") {
    reply({ type: "echo_ok", echo: body.echo });
  } else {
    reply({ type: "error", code: 10, text: "not supported: " + body.type });
  }
});
