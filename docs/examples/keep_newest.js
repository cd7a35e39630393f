// keep_newest.js: a memory for memory-audit's command protocol, in Node.js.
//
//   audit run --preset cca-pilot --conditions 'cmd:node docs/examples/keep_newest.js'
//
// One JSON line per update on standard input, one JSON line back on standard output:
// the new memory.  The memory string is the only state: nothing is kept between lines.
// This one keeps the newest whole records that fit the byte budget, one canonical
// JSON line each (a record log the exact reader can read).
"use strict";
const readline = require("readline");

function canonical(record) {
  // compact JSON; a record arrives with its fields in canonical order already
  return JSON.stringify(record);
}

function update(request) {
  const lines = request.memory ? request.memory.split("\n") : [];
  for (const record of request.chunk.records) lines.push(canonical(record));
  const kept = [];
  let used = -1; // n lines take n - 1 newlines
  for (let i = lines.length - 1; i >= 0; i--) {
    const size = Buffer.byteLength(lines[i], "utf8") + 1;
    if (used + size > request.budget) break;
    kept.unshift(lines[i]);
    used += size;
  }
  return kept.join("\n");
}

const input = readline.createInterface({ input: process.stdin });
input.on("line", (line) => {
  let answer;
  try {
    answer = { memory: update(JSON.parse(line)) };
  } catch (error) {
    answer = { error: String(error) }; // the system's own failure: scored as an error
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
});
input.on("close", () => process.exit(0)); // the audit closed our input: done
