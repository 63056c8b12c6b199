'use strict';

// What compat.js and memjs_compat.js share: their command line, the call of
// a client method with a timeout guard, the assertions and the report of
// the checks, the values, batches and reports of the persistence modes
// (`write` and `verify`), and the run of a mode with its hard time limit.
// Each program keeps what is its client library's own.

const crypto = require('crypto');
const util = require('util');

// The program's file name (for its usage line), its command line's words,
// and how one of its clients is closed; set by `setup`.
let program = null;
let words = null;
let closeClient = null;

function usage() {
  process.stderr.write(
    `usage: node ${program} HOST:PORT checks\n` +
    `       node ${program} HOST:PORT write N SEED\n` +
    `       node ${program} HOST:PORT verify N SEED\n`);
  process.exit(2);
}

// Reads the command line (HOST:PORT MODE [N SEED]) of the program named
// `name`, whose clients `close` closes, and leaves on any stray exception;
// returns {addr, mode}.
function setup(name, close) {
  program = name;
  closeClient = close;
  const [addr, mode, nArg, seedArg] = process.argv.slice(2);
  if (!addr || !/^[^:]+:\d+$/.test(addr) || !mode) usage();
  words = { addr, mode, nArg, seedArg };

  process.on('uncaughtException', (e) => {
    process.stderr.write(`FAIL uncaught exception: ${e && e.stack || e}\n`);
    finish(1);
  });
  process.on('unhandledRejection', (e) => {
    process.stderr.write(`FAIL unhandled rejection: ${e && e.stack || e}\n`);
    finish(1);
  });
  return { addr, mode };
}

const clients = [];

// A client to close when the program finishes; returned.
function keep(client) {
  clients.push(client);
  return client;
}

function closeAll() {
  for (const c of clients) {
    try { closeClient(c); } catch (e) { /* already closed */ }
  }
}

function finish(code) {
  closeAll();
  // The client keeps long timers (the `memcached` client's, for its failure
  // bookkeeping); leave now.
  process.exit(code);
}

// Call a client method with a node-style callback; resolves to {err, res},
// `res` being what `result` makes of the callback's arguments after the
// error (of none, when there is no reply). A reply that never comes within
// `timeoutMs` becomes an error instead of a hang.
function caller(timeoutMs, result) {
  return function call(client, method, ...args) {
    return new Promise((resolve) => {
      let done = false;
      const timer = setTimeout(() => {
        if (done) return;
        done = true;
        resolve({ err: new Error(`no reply to ${method} within ${timeoutMs} ms`), res: result([]), timedOut: true });
      }, timeoutMs);
      try {
        client[method](...args, (err, ...res) => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          resolve({ err, res: result(res) });
        });
      } catch (e) {
        if (done) return;
        done = true;
        clearTimeout(timer);
        resolve({ err: e, res: result([]), threw: true });
      }
    });
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class CheckFailure extends Error {}

function show(v) {
  if (Buffer.isBuffer(v)) {
    const head = v.subarray(0, 24).toString('hex');
    return `<Buffer len=${v.length} ${head}${v.length > 24 ? '...' : ''}>`;
  }
  if (typeof v === 'string' && v.length > 80) {
    return `<string len=${v.length} ${JSON.stringify(v.slice(0, 40))}...>`;
  }
  if (v instanceof Error) return `Error(${JSON.stringify(v.message)})`;
  return util.inspect(v, { depth: 4, breakLength: Infinity, maxArrayLength: 10, maxStringLength: 80 });
}

function eq(what, got, want) {
  if (!util.isDeepStrictEqual(got, want)) {
    throw new CheckFailure(`${what}: expected ${show(want)} got ${show(got)}`);
  }
}

function ok(what, cond, got) {
  if (!cond) throw new CheckFailure(`${what}: got ${show(got)}`);
}

// ---------------------------------------------------------------- checks

// The keys and the list of a run's checks: `k` makes a key under the prefix
// `P`, `letter` and 8 random hex digits, so that runs do not meet each
// other's keys; `check(name, fn)` adds a check to `checks`, for
// runCheckList.
function checkList(letter) {
  const P = letter + crypto.randomBytes(4).toString('hex') + ':';
  const k = (s) => P + s;
  const checks = [];
  const check = (name, fn) => checks.push({ name, fn });
  return { P, k, checks, check };
}

// How the stats counters move with the stats check's one of each operation:
// a set, a get hit and a get miss, an increment, a decrement, a touch and a
// delete each of a key there and of one not.
const STATS_DELTAS = {
  cmd_set: 1, cmd_get: 2, get_hits: 1, get_misses: 1, incr_hits: 1, incr_misses: 1,
  decr_hits: 1, decr_misses: 1, touch_hits: 1, touch_misses: 1, cmd_touch: 2,
  delete_hits: 1, delete_misses: 1, total_items: 1,
};

// The second half of the expiry check: waits until 3.5 s after `expiry.t0`,
// when the first half gave its last lifetime of 2 s.
async function awaitExpiry(expiry) {
  if (!expiry) throw new CheckFailure('expiry: the first half did not run');
  const left = expiry.t0 + 3500 - Date.now();
  if (left > 0) await sleep(left);
}

// Runs `checks` ({name, fn}) in order, each after `hooks.before()`, with
// `hooks.failed()` after a failure's line; then the report. Returns the
// exit code.
async function runCheckList(checks, hooks) {
  const { before, failed: onFailure } = hooks || {};
  let failed = 0;
  for (const c of checks) {
    if (before) before();
    try {
      await c.fn();
      process.stdout.write(`ok  ${c.name}\n`);
    } catch (e) {
      failed++;
      const msg = e instanceof CheckFailure ? e.message : (e && e.stack) || String(e);
      process.stderr.write(`FAIL ${c.name}: ${msg}\n`);
      if (onFailure) onFailure();
    }
  }
  if (failed) {
    process.stderr.write(`FAIL ${failed} of ${checks.length} checks\n`);
    return 1;
  }
  process.stdout.write(`ok ${checks.length} checks\n`);
  return 0;
}

// ------------------------------------------------------- write / verify

// A deterministic generator of 32-bit numbers (xorshift32) seeded by a string.
function generator(seedText) {
  const h = crypto.createHash('sha256').update(seedText).digest();
  let state = h.readUInt32LE(0) || 1;
  return () => {
    state ^= state << 13; state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5; state >>>= 0;
    return state;
  };
}

// Deterministic value for key i: a Buffer of 1..4000 bytes drawn from a
// generator seeded by SEED and i; every 7th value holds "\r\nEND\r\n".
function valueFor(seed, i) {
  const next = generator(`${seed}:${i}`);
  const len = 1 + (next() % 4000);
  const buf = Buffer.alloc(len);
  for (let j = 0; j < len; j++) buf[j] = next() & 0xff;
  if (i % 7 === 0) {
    const marker = Buffer.from('\r\nEND\r\n');
    const at = Math.floor(len / 2);
    marker.copy(buf, at, 0, Math.min(marker.length, len - at));
  }
  return buf;
}

function parseCountAndSeed() {
  const n = Number(words.nArg);
  if (!Number.isInteger(n) || n < 0 || words.seedArg === undefined) usage();
  return [n, words.seedArg];
}

// Stores keys persist:0..N-1, 100 at a time: `store(key, i)` stores key i
// and resolves to the call's {err, res}, which `stored(res)` says is a
// success. Then the report; returns the exit code.
async function writeKeys(n, store, stored) {
  const failures = [];
  const WINDOW = 100;
  for (let start = 0; start < n; start += WINDOW) {
    const batch = [];
    for (let i = start; i < Math.min(n, start + WINDOW); i++) {
      batch.push(store(`persist:${i}`, i).then((r) => [i, r]));
    }
    for (const [i, r] of await Promise.all(batch)) {
      if (r.err || !stored(r.res)) failures.push(`persist:${i}: ${r.err ? show(r.err) : show(r.res)}`);
    }
  }
  if (failures.length) {
    process.stderr.write(`FAIL write: ${failures.length} of ${n} stores failed, first: ${failures.slice(0, 5).join('; ')}\n`);
    return 1;
  }
  process.stdout.write(`ok wrote ${n} keys\n`);
  return 0;
}

// Reads keys persist:0..N-1 back, 100 at a time: `readBatch(start, end)`
// reads keys start..end-1 and resolves to the problems it found with them,
// a line each. Then the report; returns the exit code.
async function verifyKeys(n, readBatch) {
  const problems = [];
  for (let start = 0; start < n; start += 100) {
    problems.push(...await readBatch(start, Math.min(n, start + 100)));
  }
  if (problems.length) {
    process.stderr.write(`FAIL verify: ${problems.length} of ${n} keys wrong or missing\n`);
    for (const p of problems.slice(0, 5)) process.stderr.write(`  ${p}\n`);
    return 1;
  }
  process.stdout.write(`ok verified ${n} keys\n`);
  return 0;
}

// ----------------------------------------------------------------- main

// Runs the mode named on the command line, one of `modes` (checks, write,
// verify: functions resolving to the exit code), within a hard time limit.
function main(modes) {
  const { mode, nArg } = words;
  if (!modes[mode]) usage();

  const hardLimitMs = mode === 'checks' ? 60000 : 60000 + 50 * (Number(nArg) || 0);
  setTimeout(() => {
    process.stderr.write(`FAIL timeout: ${mode} did not finish within ${hardLimitMs} ms\n`);
    finish(1);
  }, hardLimitMs);

  modes[mode]().then(finish, (e) => {
    process.stderr.write(`FAIL ${mode}: ${e && e.stack || e}\n`);
    finish(1);
  });
}

module.exports = {
  setup, keep, finish, caller, sleep, CheckFailure, show, eq, ok,
  checkList, STATS_DELTAS, awaitExpiry, runCheckList,
  generator, valueFor, parseCountAndSeed, writeKeys, verifyKeys, main,
};
