#!/usr/bin/env node
'use strict';

// Runs the `memcached` npm client (text protocol) unchanged against a server
// and asserts exact results. The same program runs against a real memcached,
// whose answers define what is correct, and against Larder.
//
//   node compat.js HOST:PORT checks
//   node compat.js HOST:PORT write N SEED
//   node compat.js HOST:PORT verify N SEED

const crypto = require('crypto');
const util = require('util');
const Memcached = require('memcached');
const {
  setup, keep, caller, sleep, CheckFailure, show, eq, ok,
  checkList, STATS_DELTAS, awaitExpiry, runCheckList, valueFor, parseCountAndSeed, writeKeys, verifyKeys, main,
} = require('./harness');

// memcached@2.2.2 builds Buffers with `new Buffer()`; keep its deprecation
// notice out of the output.
process.noDeprecation = true;

const OP_TIMEOUT_MS = 5000;

const { addr } = setup('compat.js', (c) => c.end());

// Settings that make every problem visible: a pooled connection that cannot
// be had fails after a short retry instead of waiting for minutes, the server
// is never removed from the ring, and keys are never silently hashed.
const BASE_OPTIONS = {
  poolSize: 10,
  retries: 2,          // pool allocation retries (connect failures, full pool)
  minTimeout: 100,
  maxTimeout: 500,
  factor: 2,
  randomize: false,
  timeout: 3000,       // connect timeout
  idle: 30000,         // drop a pooled connection after this much silence
  failures: 5,
  retry: 200,          // after a connection issue, refuse requests this long
  reconnect: 2000,
  remove: false,
  keyCompression: false,
};

function makeClient(extra) {
  const c = new Memcached(addr, Object.assign({}, BASE_OPTIONS, extra || {}));
  c.on('failure', (d) => process.stderr.write(`note: server marked failed: ${util.inspect(d.messages)}\n`));
  return keep(c);
}

// The call of a client method (harness.js): `res` is the callback's one
// result.
const call = caller(OP_TIMEOUT_MS, (res) => res[0]);

// A reply the client reports as success: no error and exactly `want`.
function expectOk(what, r, want) {
  if (r.err) throw new CheckFailure(`${what}: expected ${show(want)} got error ${show(r.err)}`);
  eq(what, r.res, want);
}

// The client's NOT_STORED report: an Error flagged notStored, result false.
function expectNotStored(what, r) {
  ok(`${what}: expected NOT_STORED error`, r.err instanceof Error && r.err.notStored === true &&
    r.err.message === 'Item is not stored', r.err);
  eq(`${what} result`, r.res, false);
}

// The reply of a per-server command (`stats`, `settings`, `version`) from a
// client of one server: no error and exactly one server's reply, returned.
async function oneServerReply(client, method) {
  const r = await call(client, method);
  ok(`${method}: no error`, !r.err, r.err);
  ok(`${method}: one server`, Array.isArray(r.res) && r.res.length === 1, r.res);
  return r.res[0];
}

function expectErrorMessage(what, r, message) {
  ok(`${what}: expected error ${JSON.stringify(message)}`, r.err instanceof Error, r.err === undefined ? r.res : r.err);
  eq(`${what} error message`, r.err.message, message);
}

// ---------------------------------------------------------------- checks

async function runChecks() {
  const { k, checks, check } = checkList('t');
  const mc = makeClient();

  // Filled in by the settings check; memcached's default item size limit.
  let itemSizeMax = 1048576;
  // Expiry runs in the background while the other checks go on.
  let expiry = null;

  check('flush_all', async () => {
    expectOk('set before flush', await call(mc, 'set', k('flush'), 'x', 0), true);
    expectOk('flush', await call(mc, 'flush'), [true]);
    expectOk('get after flush', await call(mc, 'get', k('flush')), undefined);
  });

  check('expiry and touch (started)', async () => {
    expectOk('set lifetime 2', await call(mc, 'set', k('exp'), 'short', 2), true);
    expectOk('get at once', await call(mc, 'get', k('exp')), 'short');
    expectOk('set forever', await call(mc, 'set', k('touched'), 'was forever', 0), true);
    expectOk('touch existing', await call(mc, 'touch', k('touched'), 2), true);
    // The wait for expiry counts from the last lifetime of 2 s given.
    const t0 = Date.now();
    expectOk('touch missing', await call(mc, 'touch', k('touch-missing'), 2), false);
    expectOk('set lifetime 2, to be touched to forever', await call(mc, 'set', k('kept'), 'long', 2), true);
    expectOk('touch to forever', await call(mc, 'touch', k('kept'), 0), true);
    expectOk('get touched at once', await call(mc, 'get', k('touched')), 'was forever');
    expiry = { t0 };
  });

  check('strings', async () => {
    const values = {
      plain: 'hello world',
      utf8: 'h\u00e9llo \u2713 \u65e5\u672c \ud83d\ude00',
      crlf: 'line1\r\nline2\nline3\rline4\r\n',
      backslash: 'a\\r\\n\\\r\n\\',
      endword: 'END',
      storedword: 'STORED\r\nVALUE x 0 1\r\ny',
      spaces: '  leading and trailing  ',
    };
    for (const [name, v] of Object.entries(values)) {
      expectOk(`set ${name}`, await call(mc, 'set', k('str:' + name), v, 0), true);
    }
    for (const [name, v] of Object.entries(values)) {
      expectOk(`get ${name}`, await call(mc, 'get', k('str:' + name)), v);
    }
    expectOk('set empty', await call(mc, 'set', k('str:empty'), '', 0), true);
    expectOk('get empty', await call(mc, 'get', k('str:empty')), '');
    expectOk('get missing', await call(mc, 'get', k('str:missing')), undefined);
  });

  check('numbers and JSON', async () => {
    const values = {
      int: 42,
      neg: -7.5,
      zero: 0,
      obj: { a: 1, b: [1, 2, 'three'], c: { d: null, e: true }, s: 'x\r\ny' },
      arr: [1, 'two', { three: 3 }],
      nul: null,
      bool: true,
    };
    for (const [name, v] of Object.entries(values)) {
      expectOk(`set ${name}`, await call(mc, 'set', k('typed:' + name), v, 0), true);
    }
    for (const [name, v] of Object.entries(values)) {
      expectOk(`get ${name}`, await call(mc, 'get', k('typed:' + name)), v);
    }
  });

  // This client escapes "\r" and "\n" with a backslash and sends a Buffer as
  // its latin1 text encoded in UTF-8, undoing both when it reads; so these
  // checks show values coming back intact through this client, not raw
  // bytes 0x80-0xff or CR LF reaching the server (the Go and Java
  // programs send those).
  check('binary Buffer values', async () => {
    const all = Buffer.alloc(256);
    for (let i = 0; i < 256; i++) all[i] = i;
    const values = {
      allbytes: Buffer.concat([all, Buffer.from('\r\n'), all, Buffer.from('\r\nEND\r\n')]),
      crlf: Buffer.from('\r\n'),
      nul: Buffer.from([0]),
      high: Buffer.from([0xff, 0xfe, 0x80, 0x0d, 0x0a, 0xc3, 0x28]),
    };
    for (const [name, v] of Object.entries(values)) {
      expectOk(`set ${name}`, await call(mc, 'set', k('bin:' + name), v, 0), true);
    }
    for (const [name, v] of Object.entries(values)) {
      const r = await call(mc, 'get', k('bin:' + name));
      expectOk(`get ${name}`, r, v);
      ok(`get ${name} is a Buffer`, Buffer.isBuffer(r.res), r.res);
    }
    const keys = Object.keys(values).map((n) => k('bin:' + n));
    const want = {};
    for (const [name, v] of Object.entries(values)) want[k('bin:' + name)] = v;
    expectOk('getMulti of Buffers', await call(mc, 'getMulti', keys), want);
  });

  check('stats settings', async () => {
    const s = await oneServerReply(mc, 'settings');
    eq('settings server', s.server, addr);
    eq('settings tcpport', s.tcpport, Number(addr.split(':')[1]));
    // Both servers run with their default item size limit, 1 MiB.
    eq('settings item_size_max', s.item_size_max, 1048576);
    eq('settings cas_enabled', s.cas_enabled, 'yes');
    itemSizeMax = s.item_size_max;
  });

  check('large values', async () => {
    // Largest value that still fits comfortably in one item.
    const nearSize = itemSizeMax - 2048;
    const near = 'n'.repeat(nearSize - 10) + '0123456789';
    const big = makeClient({ maxValue: 64 * 1048576 });
    const r = await call(big, 'set', k('large:near'), near, 0);
    expectOk(`set ${nearSize} bytes`, r, true);
    const g = await call(mc, 'get', k('large:near'));
    expectOk(`get ${nearSize} bytes`, g, near);

    // The client itself refuses a value over its maxValue (1 MiB by default).
    const tooBig = 'o'.repeat(Math.max(2 * 1048576, 2 * itemSizeMax));
    expectErrorMessage('default client refuses 2 MiB locally',
      await call(mc, 'set', k('large:local'), tooBig, 0), 'The length of the value is greater than 1048576');

    // Sent to the server: SERVER_ERROR object too large for cache. The client
    // reports it as a false result (and drops that connection), and the
    // server removes the key's old value.
    expectOk('set old value', await call(mc, 'set', k('large:over'), 'old', 0), true);
    const over = await call(big, 'set', k('large:over'), tooBig, 0);
    expectOk('set over the limit', over, false);
    await sleep(50);
    expectOk('get after too-large set', await call(mc, 'get', k('large:over')), undefined);
    // The server is still usable afterwards through the same client.
    await sleep(BASE_OPTIONS.retry + 100);
    expectOk('set after error', await call(big, 'set', k('large:after'), 'fine', 0), true);
    expectOk('get after error', await call(mc, 'get', k('large:after')), 'fine');
    big.end();
  });

  check('keys', async () => {
    const long = k('') + 'L'.repeat(250 - k('').length);
    eq('key length', Buffer.byteLength(long), 250);
    expectOk('set 250-byte key', await call(mc, 'set', long, 'long key', 0), true);
    expectOk('get 250-byte key', await call(mc, 'get', long), 'long key');
    expectOk('getMulti 250-byte key', await call(mc, 'getMulti', [long, k('nokey')]), { [long]: 'long key' });
    expectOk('delete 250-byte key', await call(mc, 'del', long), true);

    const tooLong = long + 'X';
    expectErrorMessage('set 251-byte key', await call(mc, 'set', tooLong, 'v', 0),
      'Argument "key" is longer than the maximum allowed length of 250');
    expectErrorMessage('get 251-byte key', await call(mc, 'get', tooLong),
      'Argument "key" is longer than the maximum allowed length of 250');
    expectErrorMessage('key with space', await call(mc, 'set', k('a b'), 'v', 0),
      'The key should not contain any whitespace or new lines');
    expectErrorMessage('key with newline', await call(mc, 'get', k('a\nb')),
      'The key should not contain any whitespace or new lines');

    // With keyCompression (the client's default) a too-long key is sent as
    // its md5 hex digest.
    const comp = makeClient({ keyCompression: true });
    expectOk('compressed set', await call(comp, 'set', tooLong, 'hashed', 0), true);
    expectOk('compressed get', await call(comp, 'get', tooLong), 'hashed');
    const md5 = crypto.createHash('md5').update(tooLong).digest('hex');
    expectOk('stored under md5', await call(mc, 'get', md5), 'hashed');
    expectOk('delete md5 key', await call(mc, 'del', md5), true);
    comp.end();
  });

  check('add and replace', async () => {
    expectOk('set', await call(mc, 'set', k('add:exist'), 'first', 0), true);
    expectNotStored('add existing', await call(mc, 'add', k('add:exist'), 'second', 0));
    expectOk('value kept', await call(mc, 'get', k('add:exist')), 'first');
    expectOk('add new', await call(mc, 'add', k('add:new'), { fresh: 1 }, 0), true);
    expectOk('get added', await call(mc, 'get', k('add:new')), { fresh: 1 });
    expectNotStored('replace missing', await call(mc, 'replace', k('add:missing'), 'x', 0));
    expectOk('still missing', await call(mc, 'get', k('add:missing')), undefined);
    expectOk('replace existing', await call(mc, 'replace', k('add:exist'), 7, 0), true);
    expectOk('get replaced', await call(mc, 'get', k('add:exist')), 7);
  });

  check('append and prepend', async () => {
    expectOk('set', await call(mc, 'set', k('ap:s'), 'mid', 0), true);
    expectOk('append', await call(mc, 'append', k('ap:s'), '-end\r\n'), true);
    expectOk('prepend', await call(mc, 'prepend', k('ap:s'), 'start-'), true);
    expectOk('get', await call(mc, 'get', k('ap:s')), 'start-mid-end\r\n');
    // append keeps the item's flags: a number stays a number.
    expectOk('set number', await call(mc, 'set', k('ap:n'), 12, 0), true);
    expectOk('append digit', await call(mc, 'append', k('ap:n'), '3'), true);
    expectOk('prepend digit', await call(mc, 'prepend', k('ap:n'), '9'), true);
    expectOk('get number', await call(mc, 'get', k('ap:n')), 9123);
    expectNotStored('append missing', await call(mc, 'append', k('ap:missing'), 'x'));
    expectNotStored('prepend missing', await call(mc, 'prepend', k('ap:missing'), 'x'));
    expectOk('missing stays missing', await call(mc, 'get', k('ap:missing')), undefined);
  });

  check('gets and cas', async () => {
    const key = k('cas');
    expectOk('set', await call(mc, 'set', key, 'v1', 0), true);
    const g1 = await call(mc, 'gets', key);
    ok('gets: no error', !g1.err, g1.err);
    ok('gets: object with value and cas', g1.res && g1.res[key] === 'v1' && /^\d+$/.test(g1.res.cas), g1.res);
    eq('gets: exactly value and cas', Object.keys(g1.res).sort(), [key, 'cas'].sort());
    const cas1 = g1.res.cas;
    expectOk('cas with current token', await call(mc, 'cas', key, 'v2', cas1, 0), true);
    expectOk('get after cas', await call(mc, 'get', key), 'v2');
    expectOk('cas with stale token', await call(mc, 'cas', key, 'v3', cas1, 0), false);
    expectOk('value unchanged', await call(mc, 'get', key), 'v2');
    const g2 = await call(mc, 'gets', key);
    ok('gets again', !g2.err && g2.res && g2.res[key] === 'v2' && /^\d+$/.test(g2.res.cas), g2.res);
    ok('cas token changed', g2.res.cas !== cas1, g2.res.cas);
    expectOk('set bumps cas', await call(mc, 'set', key, 'v4', 0), true);
    expectOk('cas with token before set', await call(mc, 'cas', key, 'v5', g2.res.cas, 0), false);
    const g3 = await call(mc, 'gets', key);
    ok('gets after set', !g3.err && g3.res && g3.res[key] === 'v4', g3.res);
    expectOk('delete', await call(mc, 'del', key), true);
    expectOk('cas on deleted key', await call(mc, 'cas', key, 'v6', g3.res.cas, 0), false);
    expectOk('still deleted', await call(mc, 'get', key), undefined);
    expectOk('gets missing', await call(mc, 'gets', k('cas:missing')), undefined);
    // A Buffer through gets/cas.
    const bin = Buffer.from([0, 13, 10, 255, 128]);
    expectOk('set buffer', await call(mc, 'set', key, bin, 0), true);
    const g4 = await call(mc, 'gets', key);
    ok('gets buffer', !g4.err && g4.res && Buffer.isBuffer(g4.res[key]) && g4.res[key].equals(bin), g4.res);
    expectOk('cas buffer', await call(mc, 'cas', key, Buffer.from('\r\n'), g4.res.cas, 0), true);
    expectOk('get cas buffer', await call(mc, 'get', key), Buffer.from('\r\n'));
  });

  check('incr and decr', async () => {
    expectOk('set 10', await call(mc, 'set', k('n:s'), '10', 0), true);
    expectOk('incr 5', await call(mc, 'incr', k('n:s'), 5), 15);
    expectOk('decr 3', await call(mc, 'decr', k('n:s'), 3), 12);
    expectOk('get', await call(mc, 'get', k('n:s')), '12');
    // A shorter result is padded with spaces in place, as memcached does.
    expectOk('set 100', await call(mc, 'set', k('n:pad'), '100', 0), true);
    expectOk('decr to 99', await call(mc, 'decr', k('n:pad'), 1), 99);
    expectOk('get padded', await call(mc, 'get', k('n:pad')), '99 ');
    expectOk('incr padded', await call(mc, 'incr', k('n:pad'), 1), 100);
    expectOk('get 100', await call(mc, 'get', k('n:pad')), '100');
    // Flags survive incr: a numeric item stays numeric.
    expectOk('set number', await call(mc, 'set', k('n:num'), 100, 0), true);
    expectOk('incr number', await call(mc, 'incr', k('n:num'), 1), 101);
    expectOk('get number', await call(mc, 'get', k('n:num')), 101);
    expectOk('set 5', await call(mc, 'set', k('n:low'), '5', 0), true);
    expectOk('decr below 0', await call(mc, 'decr', k('n:low'), 10), 0);
    expectOk('get 0', await call(mc, 'get', k('n:low')), '0');
    expectOk('set max', await call(mc, 'set', k('n:wrap'), '18446744073709551615', 0), true);
    expectOk('incr wraps', await call(mc, 'incr', k('n:wrap'), 1), 0);
    // The item keeps its 20-byte length: "0" followed by 19 spaces.
    expectOk('get wrapped', await call(mc, 'get', k('n:wrap')), '0'.padEnd(20, ' '));
    expectOk('incr wrapped', await call(mc, 'incr', k('n:wrap'), 7), 7);
    expectOk('get 7', await call(mc, 'get', k('n:wrap')), '7'.padEnd(20, ' '));
    expectOk('set max-1', await call(mc, 'set', k('n:top'), '18446744073709551614', 0), true);
    // The reply is parsed into a JS number, which rounds.
    expectOk('incr to max', await call(mc, 'incr', k('n:top'), 1), Number('18446744073709551615'));
    expectOk('get max exactly', await call(mc, 'get', k('n:top')), '18446744073709551615');
    expectOk('incr missing', await call(mc, 'incr', k('n:missing'), 1), false);
    expectOk('decr missing', await call(mc, 'decr', k('n:missing'), 1), false);
    expectOk('missing not created', await call(mc, 'get', k('n:missing')), undefined);
    expectOk('set text', await call(mc, 'set', k('n:text'), 'abc', 0), true);
    const r = await call(mc, 'incr', k('n:text'), 1);
    expectErrorMessage('incr non-numeric', r, 'cannot increment or decrement non-numeric value');
    eq('incr non-numeric result', r.res, false);
    expectOk('text unchanged', await call(mc, 'get', k('n:text')), 'abc');
  });

  check('delete', async () => {
    expectOk('set', await call(mc, 'set', k('del'), 'x', 0), true);
    expectOk('delete hit', await call(mc, 'del', k('del')), true);
    expectOk('get deleted', await call(mc, 'get', k('del')), undefined);
    expectOk('delete miss', await call(mc, 'del', k('del')), false);
  });

  check('getMulti 200 keys', async () => {
    const keys = [];
    const want = {};
    const sets = [];
    for (let i = 0; i < 200; i++) {
      const key = k('gm:' + i);
      keys.push(key);
      if (i % 4 === 3) continue; // missing
      let v;
      switch (i % 4) {
        case 0: v = 'value-' + i + '\r\n' + 'z'.repeat(i); break;
        case 1: v = { i, s: 's' + i }; break;
        default: v = Buffer.from([i & 0xff, 13, 10, 0, 255]);
      }
      want[key] = v;
      sets.push(call(mc, 'set', key, v, 0));
    }
    const rs = await Promise.all(sets);
    rs.forEach((r, j) => expectOk(`set #${j}`, r, true));
    const r = await call(mc, 'getMulti', keys);
    ok('getMulti: no error', !r.err, r.err);
    eq('getMulti: key count', Object.keys(r.res).length, Object.keys(want).length);
    for (const key of keys) eq(`getMulti ${key}`, r.res[key], want[key]);
    expectOk('getMulti all missing', await call(mc, 'getMulti', [k('gm:none1'), k('gm:none2')]), {});
  });

  check('namespace', async () => {
    const ns = makeClient({ namespace: k('ns:') });
    expectOk('set in namespace', await call(ns, 'set', 'a', 'in ns', 0), true);
    expectOk('seen with full key', await call(mc, 'get', k('ns:a')), 'in ns');
    expectOk('get in namespace', await call(ns, 'get', 'a'), 'in ns');
    expectOk('getMulti in namespace', await call(ns, 'getMulti', ['a', 'b']), { a: 'in ns' });
    ns.end();
  });

  check('version', async () => {
    const v = await oneServerReply(mc, 'version');
    eq('version server', v.server, addr);
    ok('version x.y.z', typeof v.version === 'string' && /^\d+\.\d+\.\d+$/.test(v.version), v);
    eq('version parts', [v.major, v.minor, v.bugfix].join('.'), v.version);
  });

  check('stats', async () => {
    const get = () => oneServerReply(mc, 'stats');
    const s0 = await get();
    eq('stats server', s0.server, addr);
    const numeric = ['pid', 'uptime', 'time', 'curr_items', 'total_items', 'curr_connections',
      'total_connections', 'cmd_get', 'cmd_set', 'cmd_touch', 'get_hits', 'get_misses',
      'delete_hits', 'delete_misses', 'incr_hits', 'incr_misses', 'decr_hits', 'decr_misses',
      'cas_hits', 'cas_misses', 'cas_badval', 'touch_hits', 'touch_misses', 'bytes', 'limit_maxbytes',
      'threads'];
    for (const f of numeric) ok(`stats ${f} is a number`, Number.isInteger(s0[f]) && s0[f] >= 0, s0[f]);
    ok('stats version string', typeof s0.version === 'string' && s0.version.length > 0, s0.version);
    ok('stats curr_items counts our items', s0.curr_items >= 1, s0.curr_items);
    ok('stats curr_connections', s0.curr_connections >= 1, s0.curr_connections);

    // One of each operation; counters move by exactly one.
    expectOk('set', await call(mc, 'set', k('st:a'), '1', 0), true);
    expectOk('get hit', await call(mc, 'get', k('st:a')), '1');
    expectOk('get miss', await call(mc, 'get', k('st:none')), undefined);
    expectOk('incr hit', await call(mc, 'incr', k('st:a'), 1), 2);
    expectOk('incr miss', await call(mc, 'incr', k('st:none'), 1), false);
    expectOk('decr hit', await call(mc, 'decr', k('st:a'), 1), 1);
    expectOk('decr miss', await call(mc, 'decr', k('st:none'), 1), false);
    expectOk('touch hit', await call(mc, 'touch', k('st:a'), 0), true);
    expectOk('touch miss', await call(mc, 'touch', k('st:none'), 0), false);
    expectOk('delete hit', await call(mc, 'del', k('st:a')), true);
    expectOk('delete miss', await call(mc, 'del', k('st:a')), false);
    const s1 = await get();
    const got = {};
    for (const f of Object.keys(STATS_DELTAS)) got[f] = s1[f] - s0[f];
    eq('stats counter deltas', got, STATS_DELTAS);
  });

  check('concurrency 500 ops', async () => {
    const N = 500;
    // Seed the keys the mixed operations work on.
    const seed = [];
    for (let i = 0; i < N; i++) seed.push(call(mc, 'set', k('cc:' + i), i % 6 === 2 ? String(i) : 'seed-' + i, 0));
    (await Promise.all(seed)).forEach((r, i) => expectOk(`seed set #${i}`, r, true));

    const ops = [];
    const expectFinal = {};
    for (let i = 0; i < N; i++) {
      const key = k('cc:' + i);
      switch (i % 6) {
        case 0: // overwrite
          ops.push([`set #${i}`, call(mc, 'set', key, { i, v: 'new' }, 0), true]);
          expectFinal[key] = { i, v: 'new' };
          break;
        case 1: // read
          ops.push([`get #${i}`, call(mc, 'get', key), 'seed-' + i]);
          expectFinal[key] = 'seed-' + i;
          break;
        case 2: // counter
          ops.push([`incr #${i}`, call(mc, 'incr', key, 1000), i + 1000]);
          expectFinal[key] = String(i + 1000);
          break;
        case 3: // delete
          ops.push([`delete #${i}`, call(mc, 'del', key), true]);
          break;
        case 4: // add over an existing key fails
          ops.push([`add existing #${i}`, call(mc, 'add', key, 'nope', 0), 'NOT_STORED']);
          expectFinal[key] = 'seed-' + i;
          break;
        default: { // append to existing
          ops.push([`append #${i}`, call(mc, 'append', key, '+' + i), true]);
          expectFinal[key] = 'seed-' + i + '+' + i;
        }
      }
    }
    const results = await Promise.all(ops.map((o) => o[1]));
    results.forEach((r, j) => {
      const [what, , want] = ops[j];
      if (want === 'NOT_STORED') expectNotStored(what, r);
      else expectOk(what, r, want);
    });
    const keys = [];
    for (let i = 0; i < N; i++) keys.push(k('cc:' + i));
    const gets = [];
    for (let i = 0; i < N; i += 100) gets.push(call(mc, 'getMulti', keys.slice(i, i + 100)));
    const merged = {};
    for (const r of await Promise.all(gets)) {
      ok('getMulti after concurrency: no error', !r.err, r.err);
      Object.assign(merged, r.res);
    }
    eq('state after concurrency: key count', Object.keys(merged).length, Object.keys(expectFinal).length);
    for (const key of Object.keys(expectFinal)) eq(`state ${key}`, merged[key], expectFinal[key]);
  });

  check('expiry and touch (after 3.5 s)', async () => {
    await awaitExpiry(expiry);
    expectOk('expired key', await call(mc, 'get', k('exp')), undefined);
    expectOk('touched key expired', await call(mc, 'get', k('touched')), undefined);
    expectOk('touched to forever still there', await call(mc, 'get', k('kept')), 'long');
    expectOk('touch expired', await call(mc, 'touch', k('exp'), 10), false);
    expectOk('add over expired', await call(mc, 'add', k('exp'), 'again', 0), true);
    expectOk('get re-added', await call(mc, 'get', k('exp')), 'again');
  });

  return runCheckList(checks);
}

// ------------------------------------------------------- write / verify

// The values are harness.js's valueFor(SEED, i): every 7th holds "\r\n" and
// "END" (escaped and encoded by the client on the way, see the Buffer
// checks).

async function runWrite() {
  const [n, seed] = parseCountAndSeed();
  const mc = makeClient();
  return writeKeys(n, (key, i) => call(mc, 'set', key, valueFor(seed, i), 0), (res) => res === true);
}

async function runVerify() {
  const [n, seed] = parseCountAndSeed();
  const mc = makeClient();
  return verifyKeys(n, async (start, end) => {
    const keys = [];
    for (let i = start; i < end; i++) keys.push(`persist:${i}`);
    const r = await call(mc, 'getMulti', keys);
    if (r.err) return [`getMulti persist:${start}..: error ${show(r.err)}`];
    const problems = [];
    for (let i = start; i < end; i++) {
      const got = r.res[`persist:${i}`];
      const want = valueFor(seed, i);
      if (got === undefined) problems.push(`persist:${i}: missing`);
      else if (!Buffer.isBuffer(got) || !got.equals(want)) problems.push(`persist:${i}: expected ${show(want)} got ${show(got)}`);
    }
    return problems;
  });
}

// ----------------------------------------------------------------- main

main({ checks: runChecks, write: runWrite, verify: runVerify });
