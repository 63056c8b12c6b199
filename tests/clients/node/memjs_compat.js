#!/usr/bin/env node
'use strict';

// Runs memjs, a Node.js client that speaks only memcached's BINARY protocol,
// unchanged against a server and asserts exact results through its API. The
// same program runs against a real memcached, whose answers define what is
// correct, and against Larder.
//
//   node memjs_compat.js HOST:PORT checks
//   node memjs_compat.js HOST:PORT write N SEED
//   node memjs_compat.js HOST:PORT verify N SEED
//
// What memjs 1.3.2 offers, and so what is checked: get, set, add, replace,
// delete, increment and decrement (with an initial value and an expiry),
// append, touch, flush, stats (with a group name, and reset) and quit, by
// callback and by promise. It has no multi-get, no version, no cas and no
// flags of its own; flags go through its `serializer` option, which
// writes the request's extras. Its `prepend` sends an append's opcode
// (0x0E), which the append check shows; its increment and decrement read
// a result of 2^32 or more wrongly, so none is checked; and it checks no
// key, so the server's own refusals are checked.

const crypto = require('crypto');
const memjs = require('memjs');
const {
  setup, keep, caller, sleep, CheckFailure, show, eq, ok,
  checkList, STATS_DELTAS, awaitExpiry, runCheckList, generator, valueFor, parseCountAndSeed, writeKeys, verifyKeys, main,
} = require('./harness');

const OP_TIMEOUT_MS = 10000;

const { addr } = setup('memjs_compat.js', (c) => c.close());

// What memjs logs (each error reply, among others); shown with a failure.
let logged = [];
const logger = { log: (...parts) => logged.push(parts.join(' ')) };

// Settings that make every problem visible: one try per request (memjs
// would otherwise send a request again after an error), no failover, and a
// reply deadline that a server syncing each write to disk meets (memjs's
// default is 0.5 s).
const BASE_OPTIONS = {
  retries: 1,
  failover: false,
  timeout: OP_TIMEOUT_MS / 1000,
  conntimeout: OP_TIMEOUT_MS / 1000,
  logger,
};

// memjs's `serializer` option sees each request's value and extras: this
// one takes {data, flags} for a value and writes the flags into the first
// 4 bytes of the extras (set, add and replace have flags there), so values
// carry flags through the client's own API. Other values pass unchanged.
const flagSerializer = {
  serialize(opcode, value, extras) {
    if (value !== null && typeof value === 'object' && !Buffer.isBuffer(value) && 'flags' in value) {
      const withFlags = Buffer.from(extras);
      withFlags.writeUInt32BE(value.flags >>> 0, 0);
      return { value: value.data, extras: withFlags };
    }
    return { value, extras };
  },
  deserialize(opcode, value, extras) {
    return { value, extras };
  },
};

function makeClient(extra) {
  return keep(memjs.Client.create(addr, Object.assign({}, BASE_OPTIONS, extra || {})));
}

// The call of a client method (harness.js): `res` is the callback's
// arguments after the error, as an array.
const call = caller(OP_TIMEOUT_MS + 2000, (res) => res);

// A promise from memjs's promise API, bounded like `call`; resolves to
// {err, value}.
function settle(promise) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve({ err: new Error(`no reply within ${OP_TIMEOUT_MS + 2000} ms`) }),
      OP_TIMEOUT_MS + 2000);
    promise.then((value) => { clearTimeout(timer); resolve({ err: null, value }); },
      (err) => { clearTimeout(timer); resolve({ err }); });
  });
}

// A reply the client reports as success: no error and exactly `want` as the
// callback's arguments after the error.
function expectOk(what, r, ...want) {
  if (r.err) throw new CheckFailure(`${what}: expected ${show(want)} got error ${show(r.err)}`);
  eq(what, r.res, want);
}

// An error reply: memjs makes each one an Error "MemJS <COMMAND>: <status
// text>", the text being its own for the binary status code.
function expectError(what, r, message) {
  ok(`${what}: expected error ${JSON.stringify(message)}`, r.err instanceof Error, r.err === null ? r.res : r.err);
  eq(`${what} error message`, r.err.message, message);
}

const NO_FLAGS = Buffer.alloc(4);

function flagsBuffer(flags) {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(flags >>> 0, 0);
  return b;
}

// `get` through the default serializer: a hit is [value, flags] (both
// Buffers), a miss [null, null].
async function expectValue(what, client, key, value, flags) {
  const want = typeof value === 'string' ? Buffer.from(value) : value;
  expectOk(what, await call(client, 'get', key), want, flags === undefined ? NO_FLAGS : flagsBuffer(flags));
}

async function expectMiss(what, client, key) {
  expectOk(what, await call(client, 'get', key), null, null);
}

// The one reply of a per-server command (`stats`, `statsWithKey`, `flush`)
// from a client of one server.
async function statsOf(client, group) {
  const r = group === undefined ? await call(client, 'stats') : await call(client, 'statsWithKey', group);
  ok(`stats ${group || ''}: no error`, !r.err, r.err);
  eq(`stats ${group || ''}: server`, r.res[0], addr);
  ok(`stats ${group || ''}: a map`, r.res[1] !== null && typeof r.res[1] === 'object', r.res[1]);
  return r.res[1];
}

function counter(stats, name) {
  const v = stats[name];
  ok(`stats ${name} is a decimal number`, typeof v === 'string' && /^\d+$/.test(v), v);
  return Number(v);
}

// The value memjs's increment and decrement give as a result: [true, n].
function expectCount(what, r, n) {
  expectOk(what, r, true, n);
}

// ---------------------------------------------------------------- checks

async function runChecks() {
  const { P, k, checks, check } = checkList('j');
  const mc = makeClient();

  // Filled in by the stats check; memcached's default item size limit.
  let itemSizeMax = 1048576;
  // Expiry runs in the background while the other checks go on.
  let expiry = null;

  check('flush', async () => {
    expectOk('set before flush', await call(mc, 'set', k('flush'), 'x', {}), true);
    expectOk('flush', await call(mc, 'flush'), { [addr]: true });
    await expectMiss('get after flush', mc, k('flush'));
  });

  check('expiry, touch and increment with an expiry (started)', async () => {
    const now = Math.floor(Date.now() / 1000);
    expectOk('set expires 2', await call(mc, 'set', k('exp'), 'short', { expires: 2 }), true);
    await expectValue('get at once', mc, k('exp'), 'short');
    expectOk('set forever', await call(mc, 'set', k('touched'), 'was forever', {}), true);
    expectOk('touch existing to 2', await call(mc, 'touch', k('touched'), 2), true);
    expectOk('touch missing', await call(mc, 'touch', k('touch-missing'), 2), false);
    await expectMiss('touch did not create', mc, k('touch-missing'));
    expectOk('set expires 2, to be touched to forever', await call(mc, 'set', k('kept'), 'long', { expires: 2 }), true);
    expectOk('touch to forever', await call(mc, 'touch', k('kept'), 0), true);
    expectCount('increment of a missing counter creates it with its initial value and expiry 2',
      await call(mc, 'increment', k('exp-ctr'), 1, { initial: 5, expires: 2 }), 5);
    // The wait for expiry counts from the last lifetime of 2 s given.
    const t0 = Date.now();
    await expectValue('get counter', mc, k('exp-ctr'), '5');
    await expectValue('get touched at once', mc, k('touched'), 'was forever');
    // An expiry over 30 days is an absolute Unix time.
    expectOk('set with an absolute expiry an hour ahead', await call(mc, 'set', k('abs-ahead'), 'later', { expires: now + 3600 }), true);
    await expectValue('get with an absolute expiry ahead', mc, k('abs-ahead'), 'later');
    expectOk('set with an absolute expiry an hour ago', await call(mc, 'set', k('abs-past'), 'past', { expires: now - 3600 }), true);
    await expectMiss('get with an absolute expiry in the past', mc, k('abs-past'));
    expiry = { t0 };
  });

  check('strings come back as their UTF-8 bytes, flags 0', async () => {
    const values = {
      plain: 'hello world',
      utf8: 'h\u00e9llo \u2713 \u65e5\u672c \ud83d\ude00',
      crlf: 'line1\r\nline2\nline3\rline4\r\n',
      protocol: 'STORED\r\nVALUE x 0 1\r\ny\r\nEND\r\n',
      spaces: '  leading and trailing  ',
      empty: '',
    };
    for (const [name, v] of Object.entries(values)) {
      expectOk(`set ${name}`, await call(mc, 'set', k('str:' + name), v, {}), true);
    }
    for (const [name, v] of Object.entries(values)) {
      await expectValue(`get ${name}`, mc, k('str:' + name), v);
    }
    await expectMiss('get missing', mc, k('str:missing'));
  });

  check('binary values: every byte value, CR LF, NUL, empty', async () => {
    const all = Buffer.alloc(256);
    for (let i = 0; i < 256; i++) all[i] = i;
    const values = {
      allbytes: Buffer.concat([all, Buffer.from('\r\n'), Buffer.from(all).reverse(), Buffer.from('\r\nEND\r\n')]),
      crlf: Buffer.from('\r\n'),
      nul: Buffer.from([0]),
      high: Buffer.from([0xff, 0xfe, 0x80, 0x0d, 0x0a, 0xc3, 0x28]),
      // A value that looks like a binary response header.
      header: Buffer.from([0x81, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x01, 0, 0, 0, 9]),
      random: crypto.randomBytes(5000),
      empty: Buffer.alloc(0),
    };
    for (const [name, v] of Object.entries(values)) {
      expectOk(`set ${name}`, await call(mc, 'set', k('bin:' + name), v, {}), true);
    }
    for (const [name, v] of Object.entries(values)) {
      await expectValue(`get ${name}`, mc, k('bin:' + name), v);
    }
    const other = makeClient();
    for (const [name, v] of Object.entries(values)) {
      await expectValue(`get ${name} through a second client`, other, k('bin:' + name), v);
    }
    other.close();
  });

  check('flags through a serializer', async () => {
    const fc = makeClient({ serializer: flagSerializer });
    const cases = [0, 1, 0x1234, 0x7fffffff, 0x80000000, 0xdeadbeef, 0xffffffff];
    for (const flags of cases) {
      const key = k('flags:' + flags);
      const data = Buffer.from(`flags ${flags}`);
      expectOk(`set with flags ${flags}`, await call(fc, 'set', key, { data, flags }, {}), true);
      await expectValue(`get with flags ${flags}`, mc, key, data, flags);
    }
    const key = k('flags:ops');
    expectOk('add with flags', await call(fc, 'add', key, { data: 'mid', flags: 0xabcd }, {}), true);
    await expectValue('get after add', mc, key, 'mid', 0xabcd);
    expectOk('replace with other flags', await call(fc, 'replace', key, { data: 'mid', flags: 0x5678 }, {}), true);
    await expectValue('get after replace', mc, key, 'mid', 0x5678);
    // An append has no extras: the item keeps its flags.
    expectOk('append', await call(fc, 'append', key, '-end'), true);
    await expectValue('append keeps the flags', mc, key, 'mid-end', 0x5678);
    expectCount('increment with an initial value on a missing key',
      await call(fc, 'increment', k('flags:ctr'), 1, { initial: 3 }), 3);
    await expectValue('a counter the server created has flags 0', mc, k('flags:ctr'), '3', 0);
    expectOk('set a number with flags', await call(fc, 'set', k('flags:num'), { data: '41', flags: 0xf00d }, {}), true);
    expectCount('increment it', await call(fc, 'increment', k('flags:num'), 1, {}), 42);
    await expectValue('increment keeps the flags', mc, k('flags:num'), '42', 0xf00d);
    fc.close();
  });

  check('stats, stats settings, stats items', async () => {
    const s = await statsOf(mc);
    for (const f of ['pid', 'uptime', 'time', 'curr_items', 'total_items', 'curr_connections',
      'total_connections', 'cmd_get', 'cmd_set', 'cmd_touch', 'get_hits', 'get_misses',
      'delete_hits', 'delete_misses', 'incr_hits', 'incr_misses', 'decr_hits', 'decr_misses',
      'touch_hits', 'touch_misses', 'bytes', 'limit_maxbytes', 'threads']) {
      counter(s, f);
    }
    ok('stats version N.N.N', typeof s.version === 'string' && /^\d+\.\d+\.\d+/.test(s.version), s.version);
    ok('stats curr_items counts our items', counter(s, 'curr_items') >= 1, s.curr_items);
    ok('stats curr_connections', counter(s, 'curr_connections') >= 1, s.curr_connections);

    const settings = await statsOf(mc, 'settings');
    // Both servers run with their default item size limit, 1 MiB.
    eq('stats settings item_size_max', settings.item_size_max, '1048576');
    eq('stats settings cas_enabled', settings.cas_enabled, 'yes');
    itemSizeMax = Number(settings.item_size_max);

    const items = await statsOf(mc, 'items');
    let counted = 0;
    for (const [name, v] of Object.entries(items)) {
      if (/^items:\d+:number$/.test(name)) counted += Number(v);
    }
    ok('stats items: items:N:number adds up to >= 1', counted >= 1, items);
  });

  check('stats counters move by one per operation', async () => {
    const s0 = await statsOf(mc);
    // One of each operation. A counter memjs increments is created with
    // its initial value unless the expiry is 0xffffffff, the binary
    // protocol's "do not create": the misses use that.
    const none = { expires: 0xffffffff };
    expectOk('set', await call(mc, 'set', k('st:a'), '1', {}), true);
    await expectValue('get hit', mc, k('st:a'), '1');
    await expectMiss('get miss', mc, k('st:none'));
    expectCount('increment hit', await call(mc, 'increment', k('st:a'), 1, {}), 2);
    expectError('increment miss', await call(mc, 'increment', k('st:none'), 1, none), 'MemJS INCREMENT: Key not found');
    expectCount('decrement hit', await call(mc, 'decrement', k('st:a'), 1, {}), 1);
    expectError('decrement miss', await call(mc, 'decrement', k('st:none'), 1, none), 'MemJS DECREMENT: Key not found');
    expectOk('touch hit', await call(mc, 'touch', k('st:a'), 0), true);
    expectOk('touch miss', await call(mc, 'touch', k('st:none'), 0), false);
    expectOk('delete hit', await call(mc, 'delete', k('st:a')), true);
    expectOk('delete miss', await call(mc, 'delete', k('st:a')), false);
    const s1 = await statsOf(mc);
    const got = {};
    for (const f of Object.keys(STATS_DELTAS)) got[f] = counter(s1, f) - counter(s0, f);
    eq('stats counter deltas', got, STATS_DELTAS);
  });

  check('stats of an unknown group is refused', async () => {
    // memjs keeps waiting for a stats reply's end after an error, so this
    // uses a client of its own, closed afterwards.
    const sc = makeClient();
    const r = await call(sc, 'statsWithKey', 'no-such-group');
    expectError('stats no-such-group', r, 'MemJS STATS (no-such-group): Key not found');
    eq('stats no-such-group: server', r.res[0], addr);
    sc.close();
  });

  check('large values near 1 MiB, and over the limit', async () => {
    const nearSize = itemSizeMax - 2048;
    const near = crypto.randomBytes(nearSize);
    expectOk(`set ${nearSize} bytes`, await call(mc, 'set', k('large:near'), near, {}), true);
    await expectValue(`get ${nearSize} bytes`, mc, k('large:near'), near);
    expectError('append past the limit', await call(mc, 'append', k('large:near'), crypto.randomBytes(8192)),
      'MemJS APPEND: Item not stored');
    await expectValue('value after the refused append', mc, k('large:near'), near);

    const tooBig = crypto.randomBytes(2 * itemSizeMax);
    expectOk('set old value', await call(mc, 'set', k('large:over'), 'old', {}), true);
    expectError('set over the limit', await call(mc, 'set', k('large:over'), tooBig, {}), 'MemJS SET: Value too large');
    // The server removes the key's old value when a set is refused...
    await expectMiss('get after the refused set', mc, k('large:over'));
    // ... but not when an add or a replace is.
    expectOk('set old value again', await call(mc, 'set', k('large:over'), 'old', {}), true);
    expectError('replace over the limit', await call(mc, 'replace', k('large:over'), tooBig, {}), 'MemJS REPLACE: Value too large');
    expectError('add over the limit', await call(mc, 'add', k('large:over'), tooBig, {}), 'MemJS ADD: Value too large');
    await expectValue('get after the refused replace and add', mc, k('large:over'), 'old');
    // The connection goes on.
    expectOk('set after the errors', await call(mc, 'set', k('large:after'), 'fine', {}), true);
    await expectValue('get after the errors', mc, k('large:after'), 'fine');
  });

  check('keys: 250 bytes, UTF-8, any bytes; longer or empty refused by the server', async () => {
    const long = k('') + 'L'.repeat(250 - Buffer.byteLength(k('')));
    eq('key length', Buffer.byteLength(long), 250);
    expectOk('set 250-byte key', await call(mc, 'set', long, 'long key', {}), true);
    await expectValue('get 250-byte key', mc, long, 'long key');
    expectOk('delete 250-byte key', await call(mc, 'delete', long), true);
    await expectMiss('get after delete', mc, long);

    const rest = 250 - Buffer.byteLength(k('u'));
    const utf8 = k('u') + (rest % 2 ? 'x' : '') + '\u00e9'.repeat(rest >> 1);
    eq('UTF-8 key length in bytes', Buffer.byteLength(utf8), 250);
    expectOk('set 250-byte UTF-8 key', await call(mc, 'set', utf8, 'utf8 key', {}), true);
    await expectValue('get 250-byte UTF-8 key', mc, utf8, 'utf8 key');

    // A binary request gives its key's length in its header: any bytes go,
    // and memjs takes a Buffer as a key.
    const odd = {
      space: k('with space'),
      crlf: k('with\r\nnewline'),
      nul: k('with\0nul'),
      ctl: k('ctl\t\u0001\u007f'),
      raw: Buffer.concat([Buffer.from(k('raw')), Buffer.from([0xff, 0x00, 0x80, 0x0d, 0x0a, 0x20, 0xc3])]),
    };
    let i = 0;
    for (const [name, key] of Object.entries(odd)) {
      expectOk(`set key ${name}`, await call(mc, 'set', key, `odd ${i++}`, {}), true);
    }
    expectOk('set the keys\' common prefix', await call(mc, 'set', k('with'), 'prefix', {}), true);
    i = 0;
    for (const [name, key] of Object.entries(odd)) {
      await expectValue(`get key ${name}`, mc, key, `odd ${i++}`);
      expectOk(`delete key ${name}`, await call(mc, 'delete', key), true);
      await expectMiss(`get key ${name} after delete`, mc, key);
    }
    await expectValue('get the prefix', mc, k('with'), 'prefix');

    // Refused by the server with "Invalid arguments" (memcached then closes
    // the connection, so each uses a client of its own).
    const refused = [
      ['set 251-byte key', 'set', [long + 'X', 'v', {}], 'MemJS SET: Invalid arguments'],
      ['get 251-byte key', 'get', [long + 'X'], 'MemJS GET: Invalid arguments'],
      ['set empty key', 'set', ['', 'v', {}], 'MemJS SET: Invalid arguments'],
      ['get empty key', 'get', [''], 'MemJS GET: Invalid arguments'],
    ];
    for (const [what, method, args, message] of refused) {
      const one = makeClient();
      expectError(what, await call(one, method, ...args), message);
      one.close();
    }
    await expectMiss('the 251-byte key was not stored under its first 250 bytes', mc, long);
  });

  check('add and replace', async () => {
    expectOk('set', await call(mc, 'set', k('add:exist'), 'first', {}), true);
    expectOk('add existing', await call(mc, 'add', k('add:exist'), 'second', {}), false);
    await expectValue('value kept', mc, k('add:exist'), 'first');
    expectOk('add new', await call(mc, 'add', k('add:new'), 'fresh', {}), true);
    await expectValue('get added', mc, k('add:new'), 'fresh');
    expectOk('replace missing', await call(mc, 'replace', k('add:missing'), 'x', {}), false);
    await expectMiss('still missing', mc, k('add:missing'));
    expectOk('replace existing', await call(mc, 'replace', k('add:exist'), 'replaced', {}), true);
    await expectValue('get replaced', mc, k('add:exist'), 'replaced');
    expectOk('add with expires', await call(mc, 'add', k('add:exp'), 'e', { expires: 3600 }), true);
    expectOk('replace with expires', await call(mc, 'replace', k('add:exp'), 'f', { expires: 3600 }), true);
    await expectValue('get after replace with expires', mc, k('add:exp'), 'f');
  });

  check('append (and prepend, which memjs 1.3.2 sends as an append)', async () => {
    expectOk('set', await call(mc, 'set', k('ap:s'), 'mid', {}), true);
    expectOk('append', await call(mc, 'append', k('ap:s'), '-end\r\n'), true);
    expectOk('append bytes', await call(mc, 'append', k('ap:s'), Buffer.from([0, 0xff])), true);
    await expectValue('get', mc, k('ap:s'), Buffer.concat([Buffer.from('mid-end\r\n'), Buffer.from([0, 0xff])]));
    // memjs 1.3.2's prepend builds its request with opcode 0x0E, append's.
    expectError('prepend to a missing key', await call(mc, 'prepend', k('ap:p'), 'x'), 'MemJS PREPEND: Item not stored');
    expectOk('set', await call(mc, 'set', k('ap:p'), 'mid', {}), true);
    expectOk('prepend (sent as append)', await call(mc, 'prepend', k('ap:p'), '+p'), true);
    await expectValue('get after prepend', mc, k('ap:p'), 'mid+p');
    expectError('append to a missing key', await call(mc, 'append', k('ap:missing'), 'x'), 'MemJS APPEND: Item not stored');
    await expectMiss('missing stays missing', mc, k('ap:missing'));
    expectOk('set empty', await call(mc, 'set', k('ap:e'), '', {}), true);
    expectOk('append to an empty value', await call(mc, 'append', k('ap:e'), 'a'), true);
    expectOk('append nothing', await call(mc, 'append', k('ap:e'), ''), true);
    await expectValue('get', mc, k('ap:e'), 'a');
  });

  check('delete', async () => {
    expectOk('set', await call(mc, 'set', k('del'), 'x', {}), true);
    expectOk('delete hit', await call(mc, 'delete', k('del')), true);
    await expectMiss('get deleted', mc, k('del'));
    expectOk('delete miss', await call(mc, 'delete', k('del')), false);
    expectOk('add after delete', await call(mc, 'add', k('del'), 'again', {}), true);
    await expectValue('get after add', mc, k('del'), 'again');
  });

  check('increment and decrement, with initial values', async () => {
    expectCount('increment of a missing key gives the initial value', await call(mc, 'increment', k('n:a'), 5, { initial: 10 }), 10);
    await expectValue('the initial value is stored as text', mc, k('n:a'), '10');
    expectCount('increment 5', await call(mc, 'increment', k('n:a'), 5, { initial: 10 }), 15);
    expectCount('decrement 3', await call(mc, 'decrement', k('n:a'), 3, {}), 12);
    await expectValue('get', mc, k('n:a'), '12');
    expectCount('increment of a missing key, no initial given (0)', await call(mc, 'increment', k('n:zero'), 7, {}), 0);
    await expectValue('get', mc, k('n:zero'), '0');
    expectCount('decrement of a missing key gives the initial value', await call(mc, 'decrement', k('n:d'), 1, { initial: 3 }), 3);
    expectCount('decrement below zero stays 0', await call(mc, 'decrement', k('n:d'), 10, {}), 0);
    await expectValue('get 0', mc, k('n:d'), '0');
    // A shorter result is padded with spaces in place, as memcached does.
    expectOk('set 100', await call(mc, 'set', k('n:pad'), '100', {}), true);
    expectCount('decrement to 99', await call(mc, 'decrement', k('n:pad'), 1, {}), 99);
    await expectValue('get padded', mc, k('n:pad'), '99 ');
    expectCount('increment back to 100', await call(mc, 'increment', k('n:pad'), 1, {}), 100);
    await expectValue('get 100', mc, k('n:pad'), '100');
    expectCount('increment by 0', await call(mc, 'increment', k('n:pad'), 0, {}), 100);
    expectCount('increment by 4000000000', await call(mc, 'increment', k('n:pad'), 4000000000, {}), 4000000100);
    await expectValue('get', mc, k('n:pad'), '4000000100');
    // 2^64 - 1 + 1 wraps to 0; the item keeps its 20 bytes.
    expectOk('set 2^64-1', await call(mc, 'set', k('n:wrap'), '18446744073709551615', {}), true);
    expectCount('increment wraps', await call(mc, 'increment', k('n:wrap'), 1, {}), 0);
    await expectValue('get wrapped', mc, k('n:wrap'), '0'.padEnd(20, ' '));
    expectCount('increment the wrapped value', await call(mc, 'increment', k('n:wrap'), 7, {}), 7);
    await expectValue('get 7', mc, k('n:wrap'), '7'.padEnd(20, ' '));
    // Expiry 0xffffffff: do not create a missing key.
    expectError('increment of a missing key, not to be created', await call(mc, 'increment', k('n:none'), 1, { initial: 1, expires: 0xffffffff }),
      'MemJS INCREMENT: Key not found');
    expectError('decrement of a missing key, not to be created', await call(mc, 'decrement', k('n:none'), 1, { initial: 1, expires: 0xffffffff }),
      'MemJS DECREMENT: Key not found');
    await expectMiss('missing not created', mc, k('n:none'));
    expectCount('increment of an existing key, with "do not create"', await call(mc, 'increment', k('n:a'), 1, { expires: 0xffffffff }), 13);
    expectOk('set text', await call(mc, 'set', k('n:text'), 'abc', {}), true);
    expectError('increment non-numeric', await call(mc, 'increment', k('n:text'), 1, {}), 'MemJS INCREMENT: Incr/Decr on non-numeric value');
    expectError('decrement non-numeric', await call(mc, 'decrement', k('n:text'), 1, {}), 'MemJS DECREMENT: Incr/Decr on non-numeric value');
    await expectValue('text unchanged', mc, k('n:text'), 'abc');
    // The connection goes on after the error replies.
    expectCount('increment after the errors', await call(mc, 'increment', k('n:a'), 1, {}), 14);
  });

  check('touch', async () => {
    expectOk('set', await call(mc, 'set', k('touch'), 't', {}), true);
    expectOk('touch existing', await call(mc, 'touch', k('touch'), 3600), true);
    await expectValue('get after touch', mc, k('touch'), 't');
    expectOk('touch missing', await call(mc, 'touch', k('touch:none'), 3600), false);
    await expectMiss('get after touch of a missing key', mc, k('touch:none'));
  });

  check('promise API', async () => {
    const key = k('promise');
    eq('set', await settle(mc.set(key, 'p', { expires: 0 })), { err: null, value: true });
    eq('get', await settle(mc.get(key)), { err: null, value: { value: Buffer.from('p'), flags: NO_FLAGS } });
    eq('get missing', await settle(mc.get(k('promise:none'))), { err: null, value: { value: null, flags: null } });
    eq('add existing', await settle(mc.add(key, 'x')), { err: null, value: false });
    eq('replace existing', await settle(mc.replace(key, 'q')), { err: null, value: true });
    eq('append', await settle(mc.append(key, 'r')), { err: null, value: true });
    eq('get after append', await settle(mc.get(key)), { err: null, value: { value: Buffer.from('qr'), flags: NO_FLAGS } });
    eq('touch', await settle(mc.touch(key, 3600)), { err: null, value: true });
    eq('increment with an initial value', await settle(mc.increment(k('promise:n'), 2, { initial: 7 })), { err: null, value: { success: true, value: 7 } });
    eq('increment', await settle(mc.increment(k('promise:n'), 2, {})), { err: null, value: { success: true, value: 9 } });
    eq('decrement', await settle(mc.decrement(k('promise:n'), 4, {})), { err: null, value: { success: true, value: 5 } });
    const refused = await settle(mc.append(k('promise:none'), 'x'));
    ok('append to a missing key rejects', refused.err instanceof Error && refused.err.message === 'MemJS APPEND: Item not stored', refused);
    eq('delete', await settle(mc.delete(key)), { err: null, value: true });
    eq('delete again', await settle(mc.delete(key)), { err: null, value: false });
  });

  check('quit, then the client connects again', async () => {
    const q = makeClient();
    expectOk('set', await call(q, 'set', k('quit'), 'before quit', {}), true);
    // quit() takes no callback: the wait is for the close of the socket
    // memjs keeps on its Server (the client's `servers`, as `_socket`).
    const server = q.servers[0];
    ok('connected', server._socket !== undefined, server._socket);
    const closed = new Promise((resolve) => server._socket.once('close', resolve));
    q.quit();
    const r = await Promise.race([closed.then(() => 'closed'), sleep(OP_TIMEOUT_MS).then(() => 'still open')]);
    eq('the server closes the connection after quit', r, 'closed');
    await expectValue('get through a new connection', q, k('quit'), 'before quit');
    q.close();
  });

  check('2000 keys, pipelined', async () => {
    const N = 2000;
    const rnd = generator(P + 'many');
    const want = [];
    const sets = [];
    for (let i = 0; i < N; i++) {
      const v = crypto.randomBytes(rnd() % 3000);
      want.push(v);
      sets.push(call(mc, 'set', k('many:' + i), v, {}));
    }
    (await Promise.all(sets)).forEach((r, i) => expectOk(`set #${i}`, r, true));
    const gets = [];
    for (let i = 0; i < N; i++) gets.push(call(mc, 'get', k('many:' + i)));
    (await Promise.all(gets)).forEach((r, i) => expectOk(`get #${i}`, r, want[i], NO_FLAGS));
    const deletes = [];
    for (let i = 0; i < N; i += 3) deletes.push(call(mc, 'delete', k('many:' + i)));
    (await Promise.all(deletes)).forEach((r, j) => expectOk(`delete #${3 * j}`, r, true));
    const again = [];
    for (let i = 0; i < N; i++) again.push(call(mc, 'get', k('many:' + i)));
    (await Promise.all(again)).forEach((r, i) => {
      if (i % 3 === 0) expectOk(`get deleted #${i}`, r, null, null);
      else expectOk(`get kept #${i}`, r, want[i], NO_FLAGS);
    });
  });

  check('concurrency: 4 clients x 300 pipelined mixed operations', async () => {
    const CLIENTS = 4;
    const OPS = 300;
    const shared = k('cc:shared');
    expectOk('set shared counter', await call(mc, 'set', shared, '0', {}), true);
    const runs = [];
    for (let id = 0; id < CLIENTS; id++) {
      const c = makeClient();
      const rnd = generator(`${P}cc${id}`);
      const keys = [];
      for (let j = 0; j < 10; j++) keys.push(k(`cc:${id}:${j}`));
      const ctr = k(`cc:${id}:ctr`);
      expectOk(`client ${id}: set its counter`, await call(c, 'set', ctr, '0', {}), true);
      // Each client's requests go out on one connection without waiting:
      // the server answers them in order, so a model of this client's own
      // keys gives every reply.
      const model = new Map();
      let count = 0;
      const ops = [];
      for (let i = 0; i < OPS; i++) {
        const key = keys[rnd() % keys.length];
        const had = model.get(key);
        const v = `c${id}-${i}`;
        const at = `client ${id} op ${i} on ${key}`;
        switch (rnd() % 9) {
          case 0: case 1:
            ops.push([`${at}: set`, call(c, 'set', key, v, {}), [true]]);
            model.set(key, v);
            break;
          case 2: case 3:
            ops.push([`${at}: get`, call(c, 'get', key), had === undefined ? [null, null] : [Buffer.from(had), NO_FLAGS]]);
            break;
          case 4:
            ops.push([`${at}: add`, call(c, 'add', key, v, {}), [had === undefined]]);
            if (had === undefined) model.set(key, v);
            break;
          case 5:
            ops.push([`${at}: replace`, call(c, 'replace', key, v, {}), [had !== undefined]]);
            if (had !== undefined) model.set(key, v);
            break;
          case 6:
            ops.push([`${at}: delete`, call(c, 'delete', key), [had !== undefined]]);
            model.delete(key);
            break;
          case 7: {
            const by = 1 + (rnd() % 5);
            count += by;
            ops.push([`${at}: increment own counter`, call(c, 'increment', ctr, by, {}), [true, count]]);
            break;
          }
          default:
            ops.push([`${at}: increment shared counter`, call(c, 'increment', shared, 1, {}), 'shared']);
        }
      }
      runs.push({ id, c, ops, model, keys, ctr, count });
    }
    const sharedResults = [];
    for (const run of runs) {
      const results = await Promise.all(run.ops.map((o) => o[1]));
      results.forEach((r, j) => {
        const [what, , want] = run.ops[j];
        if (want === 'shared') {
          ok(`${what}: no error`, !r.err, r.err);
          eq(`${what}: success`, r.res[0], true);
          sharedResults.push(r.res[1]);
        } else {
          expectOk(what, r, ...want);
        }
      });
    }
    sharedResults.sort((a, b) => a - b);
    eq('shared counter: each increment gave a distinct value 1..n', sharedResults,
      Array.from({ length: sharedResults.length }, (_, i) => i + 1));
    await expectValue('shared counter value', mc, shared, String(sharedResults.length));
    for (const run of runs) {
      for (const key of run.keys) {
        const had = run.model.get(key);
        if (had === undefined) await expectMiss(`client ${run.id}: final ${key}`, mc, key);
        else await expectValue(`client ${run.id}: final ${key}`, mc, key, had);
      }
      await expectValue(`client ${run.id}: final counter`, mc, run.ctr, String(run.count));
      run.c.close();
    }
  });

  check('a second client sees the same data', async () => {
    const other = makeClient();
    const key = k('shared');
    expectOk('first client sets', await call(mc, 'set', key, 'from first', {}), true);
    await expectValue('second client reads it', other, key, 'from first');
    expectOk('second client sets', await call(other, 'set', key, 'from second', {}), true);
    await expectValue('first client reads it', mc, key, 'from second');
    expectOk('second client deletes', await call(other, 'delete', key), true);
    await expectMiss('first client misses', mc, key);
    other.close();
  });

  check('expiry, touch and increment with an expiry (after 3.5 s)', async () => {
    await awaitExpiry(expiry);
    await expectMiss('expired key', mc, k('exp'));
    await expectMiss('key touched to 2 s', mc, k('touched'));
    await expectValue('key touched to forever', mc, k('kept'), 'long');
    await expectMiss('counter created with expiry 2', mc, k('exp-ctr'));
    expectError('increment of the expired counter, not to be created',
      await call(mc, 'increment', k('exp-ctr'), 1, { expires: 0xffffffff }), 'MemJS INCREMENT: Key not found');
    await expectValue('absolute expiry an hour ahead', mc, k('abs-ahead'), 'later');
    expectOk('touch expired', await call(mc, 'touch', k('exp'), 10), false);
    expectOk('replace expired', await call(mc, 'replace', k('exp'), 'x', {}), false);
    expectOk('add over expired', await call(mc, 'add', k('exp'), 'again', {}), true);
    await expectValue('get re-added', mc, k('exp'), 'again');
  });

  // Last, after every item given a lifetime of 2 s has expired: an item
  // expiring between the two stats replies would change curr_items.
  check('stats reset', async () => {
    await expectMiss('a get to count', mc, k('reset:none'));
    const before = await statsOf(mc);
    ok('cmd_get before the reset', counter(before, 'cmd_get') >= 1, before.cmd_get);
    expectOk('resetStats', await call(mc, 'resetStats'), addr, {});
    const after = await statsOf(mc);
    for (const f of ['cmd_get', 'cmd_set', 'get_hits', 'get_misses', 'total_items']) {
      eq(`stats ${f} after the reset`, after[f], '0');
    }
    eq('stats curr_items is kept', after.curr_items, before.curr_items);
  });

  return runCheckList(checks, {
    before: () => { logged = []; },
    failed: () => {
      if (logged.length) process.stderr.write(`  memjs logged: ${logged.slice(-5).join(' | ')}\n`);
    },
  });
}

// ------------------------------------------------------- write / verify

// The values are harness.js's valueFor(SEED, i), as compat.js writes them.
// Their flags (through the serializer) follow from SEED and i too: 0 for
// every 5th key, else any 32-bit number.
function flagsFor(seed, i) {
  return i % 5 === 0 ? 0 : generator(`flags:${seed}:${i}`)();
}

async function runWrite() {
  const [n, seed] = parseCountAndSeed();
  const mc = makeClient({ serializer: flagSerializer });
  return writeKeys(n, (key, i) => {
    const value = { data: valueFor(seed, i), flags: flagsFor(seed, i) };
    return call(mc, 'set', key, value, {});
  }, (res) => res[0] === true);
}

// memjs has no multi-get: each batch of 100 gets goes out at once on the
// one connection.
async function runVerify() {
  const [n, seed] = parseCountAndSeed();
  const mc = makeClient();
  return verifyKeys(n, async (start, end) => {
    const batch = [];
    for (let i = start; i < end; i++) {
      batch.push(call(mc, 'get', `persist:${i}`).then((r) => [i, r]));
    }
    const problems = [];
    for (const [i, r] of await Promise.all(batch)) {
      const want = valueFor(seed, i);
      const wantFlags = flagsFor(seed, i);
      if (r.err) {
        problems.push(`persist:${i}: error ${show(r.err)}`);
        continue;
      }
      const [got, flags] = r.res;
      if (got === null) problems.push(`persist:${i}: missing`);
      else if (!Buffer.isBuffer(got) || !got.equals(want)) problems.push(`persist:${i}: expected ${show(want)} got ${show(got)}`);
      else if (!Buffer.isBuffer(flags) || flags.length !== 4 || flags.readUInt32BE(0) !== wantFlags) {
        problems.push(`persist:${i}: flags ${show(flags)} instead of ${wantFlags}`);
      }
    }
    return problems;
  });
}

// ----------------------------------------------------------------- main

main({ checks: runChecks, write: runWrite, verify: runVerify });
