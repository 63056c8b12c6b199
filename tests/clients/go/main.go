// Command gomemcache-compat drives a memcached-compatible server through
// github.com/bradfitz/gomemcache, an unmodified third-party Go client, and
// checks every result the client returns. The same checks run against the
// real memcached (whose behaviour defines what is correct) and against
// Larder.
//
// Usage:
//
//	go run . -addr 127.0.0.1:PORT checks
//	go run . -addr 127.0.0.1:PORT write N SEED
//	go run . -addr 127.0.0.1:PORT verify N SEED
//
// `checks` runs every check group, prints "ok  <group>" for each group that
// passes and "FAIL <group>: ..." on stderr for each failed assertion, and
// exits non-zero if anything failed. It calls flush_all (FlushAll and
// DeleteAll) in its first group, so it must not share a server with data
// that has to survive.
//
// `write` stores N keys "persist:<i>" whose values and flags are derived
// from SEED and i; `verify` reads them back with GetMulti and compares
// every value and flags word byte for byte.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

const clientTimeout = 10 * time.Second

func newClient(addr string, idle int) *memcache.Client {
	c := memcache.New(addr)
	// A durable server acknowledges writes after syncing them to disk; the
	// client's 500 ms default is too short for that on a loaded machine.
	c.Timeout = clientTimeout
	c.MaxIdleConns = idle
	return c
}

func main() {
	addr := flag.String("addr", "127.0.0.1:11211", "server address host:port")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s -addr HOST:PORT checks | write N SEED | verify N SEED\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	switch args[0] {
	case "checks":
		if len(args) != 1 {
			flag.Usage()
			os.Exit(2)
		}
		os.Exit(runChecks(*addr))
	case "write", "verify":
		if len(args) != 3 {
			flag.Usage()
			os.Exit(2)
		}
		n, err1 := strconv.Atoi(args[1])
		seed, err2 := strconv.ParseInt(args[2], 10, 64)
		if err1 != nil || err2 != nil || n < 0 {
			fmt.Fprintln(os.Stderr, "N must be a non-negative integer and SEED an integer")
			os.Exit(2)
		}
		if args[0] == "write" {
			os.Exit(runWrite(*addr, n, seed))
		}
		os.Exit(runVerify(*addr, n, seed))
	default:
		flag.Usage()
		os.Exit(2)
	}
}

// ---------------------------------------------------------------------------
// Check framework

// T collects the failures of one check group. It is safe for concurrent use.
type T struct {
	name string
	mu   sync.Mutex
	errs []string
}

func (t *T) Errorf(format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	t.mu.Lock()
	t.errs = append(t.errs, msg)
	t.mu.Unlock()
	fmt.Fprintf(os.Stderr, "FAIL %s: %s\n", t.name, msg)
}

func (t *T) failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.errs) > 0
}

// env is shared by all check groups of one run.
type env struct {
	addr   string
	c      *memcache.Client
	prefix string
}

func (e *env) key(s string) string { return e.prefix + s }

type check struct {
	name string
	fn   func(t *T, e *env)
}

func runChecks(addr string) int {
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	e := &env{
		addr:   addr,
		c:      newClient(addr, 16),
		prefix: fmt.Sprintf("gomc:%d:%08x:", time.Now().Unix(), rng.Uint32()),
	}

	// The expiry group is split in two: its items are stored early and
	// looked at again after the other groups ran, so waiting for the
	// expiry costs little extra time.
	exp := &expiry{}
	checks := []check{
		{"flush_all", checkFlush},
		{"ping", checkPing},
		{"expiry setup", exp.setup},
		{"set/get round trip", checkSetGet},
		{"flags round trip", checkFlags},
		{"binary-safe values", checkBinaryValues},
		{"large values", checkLargeValues},
		{"keys", checkKeys},
		{"add/replace", checkAddReplace},
		{"append/prepend", checkAppendPrepend},
		{"cas conflict", checkCAS},
		{"incr/decr", checkIncrDecr},
		{"incr/decr non-numeric", checkIncrNonNumeric},
		{"delete", checkDelete},
		{"touch", checkTouch},
		{"get and touch", checkGetAndTouch},
		{"get multi", checkGetMulti},
		{"concurrency", checkConcurrency},
		{"close and reuse", checkClose},
		{"expiry", exp.verify},
	}

	failed := 0
	for _, ch := range checks {
		t := &T{name: ch.name}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("panic: %v\n%s", r, debug.Stack())
				}
			}()
			ch.fn(t, e)
		}()
		if t.failed() {
			failed++
		} else {
			fmt.Printf("ok  %s\n", ch.name)
		}
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "FAIL %d of %d checks failed\n", failed, len(checks))
		return 1
	}
	fmt.Printf("ok %d checks\n", len(checks))
	return 0
}

// ---------------------------------------------------------------------------
// Assertion helpers

func errStr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", err.Error())
}

// wantErr asserts that err is exactly want (nil included).
func wantErr(t *T, what string, err, want error) bool {
	if err != want {
		t.Errorf("%s: expected error %s got %s", what, errStr(want), errStr(err))
		return false
	}
	return true
}

func showBytes(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%d bytes %q...", len(b), b[:64])
	}
	return fmt.Sprintf("%q", b)
}

// wantItem asserts that key holds value and flags, read with Get.
func wantItem(t *T, c *memcache.Client, key string, value []byte, flags uint32) *memcache.Item {
	it, err := c.Get(key)
	if err != nil {
		t.Errorf("Get(%s): expected value %s got error %s", shortKey(key), showBytes(value), errStr(err))
		return nil
	}
	if it.Key != key {
		t.Errorf("Get(%s): expected Item.Key %q got %q", shortKey(key), key, it.Key)
	}
	if !bytes.Equal(it.Value, value) {
		t.Errorf("Get(%s): expected value %s got %s", shortKey(key), showBytes(value), showBytes(it.Value))
	}
	if it.Flags != flags {
		t.Errorf("Get(%s): expected flags %d got %d", shortKey(key), flags, it.Flags)
	}
	return it
}

// wantMiss asserts that Get(key) returns ErrCacheMiss.
func wantMiss(t *T, c *memcache.Client, key string) {
	it, err := c.Get(key)
	if err != memcache.ErrCacheMiss {
		got := errStr(err)
		if it != nil {
			got = fmt.Sprintf("value %s flags %d", showBytes(it.Value), it.Flags)
		}
		t.Errorf("Get(%s): expected memcache.ErrCacheMiss got %s", shortKey(key), got)
	}
}

func shortKey(k string) string {
	if len(k) > 60 {
		return fmt.Sprintf("%q...(%d bytes)", k[:40], len(k))
	}
	return k
}

func set(t *T, c *memcache.Client, key string, value []byte, flags uint32, exp int32) bool {
	err := c.Set(&memcache.Item{Key: key, Value: value, Flags: flags, Expiration: exp})
	return wantErr(t, fmt.Sprintf("Set(%s, %s)", shortKey(key), showBytes(value)), err, nil)
}

// ---------------------------------------------------------------------------
// Check groups

func checkFlush(t *T, e *env) {
	c := e.c
	keys := []string{e.key("flush:a"), e.key("flush:b"), e.key("flush:c")}
	for _, k := range keys {
		set(t, c, k, []byte("before flush"), 3, 0)
	}
	wantErr(t, "FlushAll()", c.FlushAll(), nil)
	for _, k := range keys {
		wantMiss(t, c, k)
	}
	// Items stored after flush_all, in the same second, must stay.
	for _, k := range keys {
		set(t, c, k, []byte("after flush"), 4, 0)
	}
	for _, k := range keys {
		wantItem(t, c, k, []byte("after flush"), 4)
	}
	wantErr(t, "DeleteAll()", c.DeleteAll(), nil)
	for _, k := range keys {
		wantMiss(t, c, k)
	}
	set(t, c, keys[0], []byte("after delete all"), 5, 0)
	wantItem(t, c, keys[0], []byte("after delete all"), 5)
}

func checkPing(t *T, e *env) {
	wantErr(t, "Ping()", e.c.Ping(), nil)
}

func checkSetGet(t *T, e *env) {
	c := e.c
	k := e.key("setget")
	set(t, c, k, []byte("hello"), 0, 0)
	wantItem(t, c, k, []byte("hello"), 0)
	// Overwrite with a shorter and then a longer value.
	set(t, c, k, []byte("hi"), 0, 0)
	wantItem(t, c, k, []byte("hi"), 0)
	set(t, c, k, []byte("a longer value than before"), 0, 0)
	wantItem(t, c, k, []byte("a longer value than before"), 0)
	wantMiss(t, c, e.key("setget:never-set"))

	// gets returns a CAS id, and a new store changes it.
	it1, err := c.Get(k)
	if wantErr(t, "Get", err, nil) {
		if it1.CasID == 0 {
			t.Errorf("Get(%s): expected a non-zero CasID got 0", k)
		}
		set(t, c, k, []byte("again"), 0, 0)
		it2, err := c.Get(k)
		if wantErr(t, "Get", err, nil) && it2.CasID == it1.CasID {
			t.Errorf("Get(%s) after Set: expected a CasID other than %d got %d", k, it1.CasID, it2.CasID)
		}
	}
}

func checkFlags(t *T, e *env) {
	c := e.c
	for i, f := range []uint32{0, 1, 2, 255, 256, 65535, 65536, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF} {
		k := e.key(fmt.Sprintf("flags:%d", i))
		v := []byte(fmt.Sprintf("flags %d", f))
		set(t, c, k, v, f, 0)
		wantItem(t, c, k, v, f)
	}
	// Flags are replaced by a later Set.
	k := e.key("flags:change")
	set(t, c, k, []byte("x"), 0xFFFFFFFF, 0)
	set(t, c, k, []byte("x"), 0, 0)
	wantItem(t, c, k, []byte("x"), 0)
}

func allBytes() []byte {
	b := make([]byte, 0, 300)
	for i := 0; i < 256; i++ {
		b = append(b, byte(i))
	}
	return b
}

func checkBinaryValues(t *T, e *env) {
	c := e.c
	every := allBytes()
	withCRLF := append(append([]byte("line one\r\nline two\r\n"), every...), []byte("\r\nEND\r\n")...)
	values := map[string][]byte{
		"all-bytes":        every,
		"all-bytes-crlf":   withCRLF,
		"empty":            {},
		"crlf-only":        []byte("\r\n"),
		"end-marker":       []byte("END\r\n"),
		"fake-value-line":  []byte("VALUE x 0 1\r\ny\r\nEND\r\n"),
		"nul":              {0},
		"nul-run":          make([]byte, 100),
		"lf-only":          []byte("\n\n\n"),
		"cr-only":          []byte("\r"),
		"trailing-cr":      []byte("abc\r"),
		"high-bytes":       {0x80, 0xfe, 0xff, 0x7f},
		"utf8":             []byte("värde – 値 – значение"),
		"1000-bytes":       bytes.Repeat([]byte("0123456789"), 100),
		"1000-random":      randomBytes(1000, 42),
		"space-and-digits": []byte(" 12 34 "),
	}
	i := 0
	for name, v := range values {
		k := e.key("bin:" + name)
		flags := uint32(i * 7919)
		i++
		set(t, c, k, v, flags, 0)
		it := wantItem(t, c, k, v, flags)
		if it != nil && it.Value == nil && len(v) == 0 {
			// An empty value is returned as an empty, non-nil slice by
			// the client; nil would mean no data block was read.
			t.Errorf("Get(%s): expected an empty non-nil value got nil", k)
		}
	}
	// All of them at once through one multi-key get.
	keys := make([]string, 0, len(values))
	for name := range values {
		keys = append(keys, e.key("bin:"+name))
	}
	m, err := c.GetMulti(keys)
	if wantErr(t, "GetMulti(binary keys)", err, nil) {
		if len(m) != len(values) {
			t.Errorf("GetMulti(binary keys): expected %d items got %d", len(values), len(m))
		}
		for name, v := range values {
			it, ok := m[e.key("bin:"+name)]
			if !ok {
				t.Errorf("GetMulti(binary keys): expected key %s got it missing", name)
				continue
			}
			if !bytes.Equal(it.Value, v) {
				t.Errorf("GetMulti(binary keys) %s: expected %s got %s", name, showBytes(v), showBytes(it.Value))
			}
		}
	}
}

func randomBytes(n int, seed int64) []byte {
	r := rand.New(rand.NewSource(seed))
	b := make([]byte, n)
	r.Read(b)
	return b
}

// nearMax is a value size that memcached accepts with its default 1 MiB
// item size limit (the limit covers the item header and key as well).
const nearMax = 1024*1024 - 512

func checkLargeValues(t *T, e *env) {
	c := e.c
	k := e.key("large:near-max")
	v := randomBytes(nearMax, 7)
	// Put \r\n and END markers inside the value as well.
	copy(v[1000:], "\r\nEND\r\n")
	copy(v[nearMax-7:], "\r\nEND\r\n")
	if set(t, c, k, v, 77, 0) {
		wantItem(t, c, k, v, 77)
	}

	// A 512 KiB value, around the size where memcached starts chunking items.
	k2 := e.key("large:half")
	v2 := randomBytes(512*1024+1, 8)
	if set(t, c, k2, v2, 78, 0) {
		wantItem(t, c, k2, v2, 78)
	}

	// A value over the limit is refused, and a refused set removes the old
	// value of the key (memcached unlinks it so no stale data stays).
	k3 := e.key("large:too-big")
	set(t, c, k3, []byte("old value"), 1, 0)
	big := bytes.Repeat([]byte("x"), 2*1024*1024)
	err := c.Set(&memcache.Item{Key: k3, Value: big, Flags: 2})
	if err == nil {
		t.Errorf("Set(%s, 2 MiB): expected an error got <nil>", k3)
	} else {
		switch err {
		case memcache.ErrNotStored, memcache.ErrCacheMiss, memcache.ErrCASConflict, memcache.ErrMalformedKey:
			t.Errorf("Set(%s, 2 MiB): expected a server error got %s", k3, errStr(err))
		}
		if !strings.Contains(err.Error(), "SERVER_ERROR") {
			t.Errorf("Set(%s, 2 MiB): expected an error carrying the server's SERVER_ERROR line got %s", k3, errStr(err))
		}
	}
	wantMiss(t, c, k3)
	// A too-large set of a key that did not exist leaves it missing.
	k4 := e.key("large:too-big-new")
	err = c.Set(&memcache.Item{Key: k4, Value: big})
	if err == nil {
		t.Errorf("Set(%s, 2 MiB): expected an error got <nil>", k4)
	}
	wantMiss(t, c, k4)
	// The client and server are still usable afterwards.
	k5 := e.key("large:after")
	set(t, c, k5, []byte("fine"), 0, 0)
	wantItem(t, c, k5, []byte("fine"), 0)
	// The near-limit value is unaffected.
	wantItem(t, c, k, v, 77)
}

func checkKeys(t *T, e *env) {
	c := e.c
	// A key of exactly 250 bytes is the longest allowed.
	k250 := e.key("k250:")
	k250 += strings.Repeat("k", 250-len(k250))
	if len(k250) != 250 {
		t.Errorf("internal: key length %d", len(k250))
	}
	set(t, c, k250, []byte("long key"), 250, 0)
	wantItem(t, c, k250, []byte("long key"), 250)
	m, err := c.GetMulti([]string{k250})
	if wantErr(t, "GetMulti(250-byte key)", err, nil) {
		if it, ok := m[k250]; !ok || string(it.Value) != "long key" {
			t.Errorf("GetMulti(250-byte key): expected value \"long key\" got %v", m)
		}
	}
	wantErr(t, "Delete(250-byte key)", c.Delete(k250), nil)
	wantMiss(t, c, k250)

	// Keys with bytes above 0x7f (UTF-8) are legal for the client and the
	// text protocol.
	ku := e.key("ключ-é-値")
	set(t, c, ku, []byte("utf8 key"), 8, 0)
	wantItem(t, c, ku, []byte("utf8 key"), 8)
	// Punctuation is legal too.
	kp := e.key("a:b/c-d_e.f|g#h$i%j&k*l(m)n[o]p{q}r!s?t@u~v`w'x\"y,z;+=<>^\\")
	set(t, c, kp, []byte("punct key"), 9, 0)
	wantItem(t, c, kp, []byte("punct key"), 9)

	// The client validates keys itself; these never reach the server.
	set(t, c, k250, []byte("kept"), 250, 0)
	k251 := k250 + "k"
	bad := map[string]string{
		"251 bytes":   k251,
		"space":       e.key("has space"),
		"tab":         e.key("has\ttab"),
		"newline":     e.key("has\nnewline"),
		"crlf":        e.key("has\r\ncrlf"),
		"nul":         e.key("has\x00nul"),
		"del (0x7f)":  e.key("has\x7fdel"),
		"1000 bytes":  strings.Repeat("x", 1000),
		"leading sp":  " " + e.key("lead"),
		"trailing sp": e.key("trail") + " ",
	}
	for name, k := range bad {
		wantErr(t, "Set(key with "+name+")", c.Set(&memcache.Item{Key: k, Value: []byte("v")}), memcache.ErrMalformedKey)
		_, err := c.Get(k)
		wantErr(t, "Get(key with "+name+")", err, memcache.ErrMalformedKey)
		wantErr(t, "Delete(key with "+name+")", c.Delete(k), memcache.ErrMalformedKey)
		_, err = c.Increment(k, 1)
		wantErr(t, "Increment(key with "+name+")", err, memcache.ErrMalformedKey)
		wantErr(t, "Touch(key with "+name+")", c.Touch(k, 10), memcache.ErrMalformedKey)
		_, err = c.GetMulti([]string{e.key("fine"), k})
		wantErr(t, "GetMulti(key with "+name+")", err, memcache.ErrMalformedKey)
	}
	// The refused 251-byte key did not overwrite its 250-byte prefix.
	wantItem(t, c, k250, []byte("kept"), 250)
}

func checkAddReplace(t *T, e *env) {
	c := e.c
	k := e.key("add:existing")
	set(t, c, k, []byte("original"), 1, 0)
	wantErr(t, "Add(existing key)", c.Add(&memcache.Item{Key: k, Value: []byte("added"), Flags: 2}), memcache.ErrNotStored)
	wantItem(t, c, k, []byte("original"), 1)

	kn := e.key("add:new")
	wantErr(t, "Add(new key)", c.Add(&memcache.Item{Key: kn, Value: []byte("added"), Flags: 3}), nil)
	wantItem(t, c, kn, []byte("added"), 3)
	wantErr(t, "Add(same key again)", c.Add(&memcache.Item{Key: kn, Value: []byte("again"), Flags: 4}), memcache.ErrNotStored)
	wantItem(t, c, kn, []byte("added"), 3)

	// Add succeeds again once the key was deleted.
	wantErr(t, "Delete", c.Delete(kn), nil)
	wantErr(t, "Add(deleted key)", c.Add(&memcache.Item{Key: kn, Value: []byte("re-added"), Flags: 5}), nil)
	wantItem(t, c, kn, []byte("re-added"), 5)

	km := e.key("replace:missing")
	wantErr(t, "Replace(missing key)", c.Replace(&memcache.Item{Key: km, Value: []byte("r")}), memcache.ErrNotStored)
	wantMiss(t, c, km)

	wantErr(t, "Replace(existing key)", c.Replace(&memcache.Item{Key: k, Value: []byte("replaced"), Flags: 6}), nil)
	wantItem(t, c, k, []byte("replaced"), 6)
	wantErr(t, "Replace(existing key, empty value)", c.Replace(&memcache.Item{Key: k, Value: []byte{}, Flags: 7}), nil)
	wantItem(t, c, k, []byte{}, 7)
}

func checkAppendPrepend(t *T, e *env) {
	c := e.c
	k := e.key("append")
	set(t, c, k, []byte("middle"), 42, 0)
	wantErr(t, "Append", c.Append(&memcache.Item{Key: k, Value: []byte("-end")}), nil)
	wantItem(t, c, k, []byte("middle-end"), 42)
	wantErr(t, "Prepend", c.Prepend(&memcache.Item{Key: k, Value: []byte("start-")}), nil)
	wantItem(t, c, k, []byte("start-middle-end"), 42)

	// The flags of the appended item are ignored; the stored ones stay.
	wantErr(t, "Append(other flags)", c.Append(&memcache.Item{Key: k, Value: []byte("!"), Flags: 9}), nil)
	wantErr(t, "Prepend(other flags)", c.Prepend(&memcache.Item{Key: k, Value: []byte("!"), Flags: 10}), nil)
	wantItem(t, c, k, []byte("!start-middle-end!"), 42)

	// Binary data and empty pieces.
	kb := e.key("append:binary")
	set(t, c, kb, []byte{}, 0, 0)
	wantErr(t, "Append(empty)", c.Append(&memcache.Item{Key: kb, Value: []byte{}}), nil)
	wantItem(t, c, kb, []byte{}, 0)
	every := allBytes()
	wantErr(t, "Append(all bytes)", c.Append(&memcache.Item{Key: kb, Value: every}), nil)
	wantErr(t, "Prepend(crlf)", c.Prepend(&memcache.Item{Key: kb, Value: []byte("\r\n")}), nil)
	wantErr(t, "Append(crlf)", c.Append(&memcache.Item{Key: kb, Value: []byte("\r\n")}), nil)
	want := append(append([]byte("\r\n"), every...), '\r', '\n')
	wantItem(t, c, kb, want, 0)

	// Appending changes the CAS id.
	it1, err := c.Get(k)
	if wantErr(t, "Get", err, nil) {
		wantErr(t, "Append", c.Append(&memcache.Item{Key: k, Value: []byte("?")}), nil)
		wantErr(t, "CompareAndSwap(after Append)", c.CompareAndSwap(it1), memcache.ErrCASConflict)
	}

	// Append and prepend on a missing key are not stored and create nothing.
	km := e.key("append:missing")
	wantErr(t, "Append(missing key)", c.Append(&memcache.Item{Key: km, Value: []byte("x")}), memcache.ErrNotStored)
	wantMiss(t, c, km)
	wantErr(t, "Prepend(missing key)", c.Prepend(&memcache.Item{Key: km, Value: []byte("x")}), memcache.ErrNotStored)
	wantMiss(t, c, km)

	// Repeated appends build up a value larger than any single piece.
	kr := e.key("append:repeat")
	set(t, c, kr, []byte("0"), 0, 0)
	var wantR bytes.Buffer
	wantR.WriteString("0")
	for i := 1; i <= 100; i++ {
		piece := []byte(fmt.Sprintf(",%d", i))
		wantErr(t, "Append(repeat)", c.Append(&memcache.Item{Key: kr, Value: piece}), nil)
		wantR.Write(piece)
	}
	wantItem(t, c, kr, wantR.Bytes(), 0)
}

func checkCAS(t *T, e *env) {
	c := e.c
	k := e.key("cas")
	set(t, c, k, []byte("v1"), 1, 0)
	it, err := c.Get(k)
	if !wantErr(t, "Get", err, nil) {
		return
	}
	it.Value = []byte("v2")
	it.Flags = 2
	wantErr(t, "CompareAndSwap(fresh item)", c.CompareAndSwap(it), nil)
	wantItem(t, c, k, []byte("v2"), 2)

	// The item's CasID is now stale.
	it.Value = []byte("v3")
	wantErr(t, "CompareAndSwap(stale item)", c.CompareAndSwap(it), memcache.ErrCASConflict)
	wantItem(t, c, k, []byte("v2"), 2)

	// Another client's Set in between makes a fetched item stale.
	it2, err := c.Get(k)
	if wantErr(t, "Get", err, nil) {
		set(t, c, k, []byte("by someone else"), 3, 0)
		it2.Value = []byte("lost update")
		wantErr(t, "CompareAndSwap(after Set)", c.CompareAndSwap(it2), memcache.ErrCASConflict)
		wantItem(t, c, k, []byte("by someone else"), 3)
	}

	// Two clients race with the same fetched item: exactly one wins.
	it3, err := c.Get(k)
	if wantErr(t, "Get", err, nil) {
		a := *it3
		b := *it3
		a.Value = []byte("winner")
		b.Value = []byte("loser")
		wantErr(t, "CompareAndSwap(first)", c.CompareAndSwap(&a), nil)
		wantErr(t, "CompareAndSwap(second)", c.CompareAndSwap(&b), memcache.ErrCASConflict)
		wantItem(t, c, k, []byte("winner"), 3)
	}

	// CasIDs from GetMulti work too.
	m, err := c.GetMulti([]string{k})
	if wantErr(t, "GetMulti", err, nil) {
		if itm, ok := m[k]; !ok {
			t.Errorf("GetMulti(%s): expected the item got it missing", k)
		} else {
			itm.Value = []byte("via multi")
			wantErr(t, "CompareAndSwap(GetMulti item)", c.CompareAndSwap(itm), nil)
			wantItem(t, c, k, []byte("via multi"), 3)
		}
	}

	// A CAS on a deleted key reports a miss and does not create it.
	it4, err := c.Get(k)
	if wantErr(t, "Get", err, nil) {
		wantErr(t, "Delete", c.Delete(k), nil)
		it4.Value = []byte("resurrected")
		wantErr(t, "CompareAndSwap(deleted key)", c.CompareAndSwap(it4), memcache.ErrCacheMiss)
		wantMiss(t, c, k)
	}

	// A CAS on a key that never existed, with a made-up id.
	kn := e.key("cas:never")
	wantErr(t, "CompareAndSwap(missing key)", c.CompareAndSwap(&memcache.Item{Key: kn, Value: []byte("x"), CasID: 12345}), memcache.ErrCacheMiss)
	wantMiss(t, c, kn)

	// A wrong CAS id on an existing key is a conflict.
	kw := e.key("cas:wrong")
	set(t, c, kw, []byte("w"), 0, 0)
	itw, err := c.Get(kw)
	if wantErr(t, "Get", err, nil) {
		itw.CasID++
		itw.Value = []byte("x")
		wantErr(t, "CompareAndSwap(wrong id)", c.CompareAndSwap(itw), memcache.ErrCASConflict)
		wantItem(t, c, kw, []byte("w"), 0)
	}
}

func wantIncr(t *T, what string, got uint64, err error, want uint64) {
	if err != nil {
		t.Errorf("%s: expected %d got error %s", what, want, errStr(err))
		return
	}
	if got != want {
		t.Errorf("%s: expected %d got %d", what, want, got)
	}
}

// wantNumber asserts the stored value of a counter. The text protocol lets a
// server pad a decremented number with trailing spaces (memcached does, when
// the number gets shorter), so trailing spaces are ignored.
func wantNumber(t *T, c *memcache.Client, key string, want uint64, flags uint32) {
	it, err := c.Get(key)
	if err != nil {
		t.Errorf("Get(%s): expected %d got error %s", key, want, errStr(err))
		return
	}
	s := strings.TrimRight(string(it.Value), " ")
	if s != strconv.FormatUint(want, 10) {
		t.Errorf("Get(%s): expected %q got %q", key, strconv.FormatUint(want, 10), it.Value)
	}
	if it.Flags != flags {
		t.Errorf("Get(%s): expected flags %d got %d", key, flags, it.Flags)
	}
}

func checkIncrDecr(t *T, e *env) {
	c := e.c
	k := e.key("counter")
	set(t, c, k, []byte("10"), 5, 0)
	v, err := c.Increment(k, 5)
	wantIncr(t, "Increment(10, 5)", v, err, 15)
	wantNumber(t, c, k, 15, 5)
	v, err = c.Decrement(k, 3)
	wantIncr(t, "Decrement(15, 3)", v, err, 12)
	wantNumber(t, c, k, 12, 5)
	v, err = c.Increment(k, 0)
	wantIncr(t, "Increment(12, 0)", v, err, 12)
	v, err = c.Decrement(k, 3)
	wantIncr(t, "Decrement(12, 3)", v, err, 9)
	wantNumber(t, c, k, 9, 5)

	// Decrement below zero stays at zero.
	v, err = c.Decrement(k, 100)
	wantIncr(t, "Decrement(9, 100)", v, err, 0)
	wantNumber(t, c, k, 0, 5)
	v, err = c.Decrement(k, 1)
	wantIncr(t, "Decrement(0, 1)", v, err, 0)

	// The number grows longer than the stored value.
	k2 := e.key("counter:grow")
	set(t, c, k2, []byte("99"), 0, 0)
	v, err = c.Increment(k2, 1)
	wantIncr(t, "Increment(99, 1)", v, err, 100)
	wantItem(t, c, k2, []byte("100"), 0)
	v, err = c.Increment(k2, 1000000000000)
	wantIncr(t, "Increment(100, 1e12)", v, err, 1000000000100)
	wantItem(t, c, k2, []byte("1000000000100"), 0)

	// Wrapping at 2^64.
	kw := e.key("counter:wrap")
	set(t, c, kw, []byte("18446744073709551615"), 0, 0)
	v, err = c.Increment(kw, 1)
	wantIncr(t, "Increment(2^64-1, 1)", v, err, 0)
	wantNumber(t, c, kw, 0, 0)
	set(t, c, kw, []byte("18446744073709551610"), 0, 0)
	v, err = c.Increment(kw, 10)
	wantIncr(t, "Increment(2^64-6, 10)", v, err, 4)
	set(t, c, kw, []byte("1"), 0, 0)
	v, err = c.Increment(kw, 18446744073709551615)
	wantIncr(t, "Increment(1, 2^64-1)", v, err, 0)
	set(t, c, kw, []byte("5"), 0, 0)
	v, err = c.Decrement(kw, 18446744073709551615)
	wantIncr(t, "Decrement(5, 2^64-1)", v, err, 0)
	set(t, c, kw, []byte("18446744073709551615"), 0, 0)
	v, err = c.Decrement(kw, 1)
	wantIncr(t, "Decrement(2^64-1, 1)", v, err, 18446744073709551614)
	v, err = c.Increment(kw, 0)
	wantIncr(t, "Increment(2^64-2, 0)", v, err, 18446744073709551614)

	// Leading zeros are accepted.
	kz := e.key("counter:zeros")
	set(t, c, kz, []byte("007"), 0, 0)
	v, err = c.Increment(kz, 1)
	wantIncr(t, "Increment(007, 1)", v, err, 8)

	// Missing keys are misses and are not created.
	km := e.key("counter:missing")
	_, err = c.Increment(km, 1)
	wantErr(t, "Increment(missing key)", err, memcache.ErrCacheMiss)
	_, err = c.Decrement(km, 1)
	wantErr(t, "Decrement(missing key)", err, memcache.ErrCacheMiss)
	wantMiss(t, c, km)

	// Incr changes the CAS id.
	it, err := c.Get(k)
	if wantErr(t, "Get", err, nil) {
		_, err = c.Increment(k, 1)
		wantErr(t, "Increment", err, nil)
		it.Value = []byte("cas")
		wantErr(t, "CompareAndSwap(after Increment)", c.CompareAndSwap(it), memcache.ErrCASConflict)
	}
}

func checkIncrNonNumeric(t *T, e *env) {
	c := e.c
	// memcached answers CLIENT_ERROR for these; the client turns that into
	// an error starting with "memcache: client error: ". The value stays.
	values := []string{"abc", "12abc", "-1", "18446744073709551616", "1.5", ""}
	for i, val := range values {
		k := e.key(fmt.Sprintf("nonnum:%d", i))
		set(t, c, k, []byte(val), 3, 0)
		for _, op := range []string{"Increment", "Decrement"} {
			var err error
			if op == "Increment" {
				_, err = c.Increment(k, 1)
			} else {
				_, err = c.Decrement(k, 1)
			}
			what := fmt.Sprintf("%s(value %q)", op, val)
			if err == nil {
				t.Errorf("%s: expected a client error got <nil>", what)
			} else if !strings.HasPrefix(err.Error(), "memcache: client error: ") {
				t.Errorf("%s: expected an error starting \"memcache: client error: \" got %s", what, errStr(err))
			}
		}
		wantItem(t, c, k, []byte(val), 3)
	}
}

func checkDelete(t *T, e *env) {
	c := e.c
	k := e.key("delete")
	set(t, c, k, []byte("doomed"), 0, 0)
	wantErr(t, "Delete(existing)", c.Delete(k), nil)
	wantMiss(t, c, k)
	wantErr(t, "Delete(again)", c.Delete(k), memcache.ErrCacheMiss)
	wantErr(t, "Delete(never set)", c.Delete(e.key("delete:never")), memcache.ErrCacheMiss)
	// A deleted key can be set again.
	set(t, c, k, []byte("back"), 1, 0)
	wantItem(t, c, k, []byte("back"), 1)
	// Deleting one key leaves its neighbours alone.
	k2 := e.key("delete:neighbour")
	set(t, c, k2, []byte("stays"), 0, 0)
	wantErr(t, "Delete", c.Delete(k), nil)
	wantItem(t, c, k2, []byte("stays"), 0)
}

func checkTouch(t *T, e *env) {
	c := e.c
	k := e.key("touch")
	set(t, c, k, []byte("touched"), 11, 0)
	wantErr(t, "Touch(existing, 100)", c.Touch(k, 100), nil)
	wantItem(t, c, k, []byte("touched"), 11)
	wantErr(t, "Touch(existing, 0)", c.Touch(k, 0), nil)
	wantItem(t, c, k, []byte("touched"), 11)
	wantErr(t, "Touch(missing)", c.Touch(e.key("touch:missing"), 100), memcache.ErrCacheMiss)
	wantMiss(t, c, e.key("touch:missing"))
}

func checkGetAndTouch(t *T, e *env) {
	c := e.c
	k := e.key("gat")
	set(t, c, k, []byte("gat value"), 12, 0)
	it, err := c.GetAndTouch(k, 100)
	if wantErr(t, "GetAndTouch(existing)", err, nil) {
		if it.Key != k || string(it.Value) != "gat value" || it.Flags != 12 {
			t.Errorf("GetAndTouch(%s): expected value \"gat value\" flags 12 got key %q value %q flags %d", k, it.Key, it.Value, it.Flags)
		}
	}
	wantItem(t, c, k, []byte("gat value"), 12)
	_, err = c.GetAndTouch(e.key("gat:missing"), 100)
	wantErr(t, "GetAndTouch(missing)", err, memcache.ErrCacheMiss)
	// Binary value through gat.
	kb := e.key("gat:binary")
	v := append([]byte("x\r\nEND\r\n"), allBytes()...)
	set(t, c, kb, v, 13, 0)
	it, err = c.GetAndTouch(kb, 0)
	if wantErr(t, "GetAndTouch(binary)", err, nil) {
		if !bytes.Equal(it.Value, v) || it.Flags != 13 {
			t.Errorf("GetAndTouch(%s): expected %s flags 13 got %s flags %d", kb, showBytes(v), showBytes(it.Value), it.Flags)
		}
	}
}

func checkGetMulti(t *T, e *env) {
	c := e.c
	const n = 200
	keys := make([]string, n)
	want := map[string]*memcache.Item{}
	for i := 0; i < n; i++ {
		keys[i] = e.key(fmt.Sprintf("multi:%03d", i))
		if i%3 == 0 || i%7 == 0 {
			continue // left missing
		}
		v := bytes.Repeat([]byte{byte(i)}, i%50)
		v = append(v, []byte(fmt.Sprintf("value %d\r\n", i))...)
		it := &memcache.Item{Key: keys[i], Value: v, Flags: uint32(i * 1000003)}
		if set(t, c, it.Key, it.Value, it.Flags, 0) {
			want[it.Key] = it
		}
	}
	m, err := c.GetMulti(keys)
	if !wantErr(t, "GetMulti(200 keys)", err, nil) {
		return
	}
	if len(m) != len(want) {
		t.Errorf("GetMulti(200 keys): expected %d items got %d", len(want), len(m))
	}
	for k, w := range want {
		it, ok := m[k]
		if !ok {
			t.Errorf("GetMulti: expected key %s got it missing", k)
			continue
		}
		if it.Key != k || !bytes.Equal(it.Value, w.Value) || it.Flags != w.Flags {
			t.Errorf("GetMulti %s: expected value %s flags %d got key %s value %s flags %d", k, showBytes(w.Value), w.Flags, it.Key, showBytes(it.Value), it.Flags)
		}
		if it.CasID == 0 {
			t.Errorf("GetMulti %s: expected a non-zero CasID got 0", k)
		}
	}
	for k := range m {
		if _, ok := want[k]; !ok {
			t.Errorf("GetMulti: expected key %s to be missing got it present", k)
		}
	}

	// The same key twice, and only missing keys.
	m, err = c.GetMulti([]string{keys[1], keys[1]})
	if wantErr(t, "GetMulti(duplicate key)", err, nil) {
		if it, ok := m[keys[1]]; len(m) != 1 || !ok || !bytes.Equal(it.Value, want[keys[1]].Value) {
			t.Errorf("GetMulti(duplicate key): expected 1 item got %d", len(m))
		}
	}
	m, err = c.GetMulti([]string{keys[0], keys[3], keys[6]})
	if wantErr(t, "GetMulti(missing keys)", err, nil) && len(m) != 0 {
		t.Errorf("GetMulti(missing keys): expected 0 items got %d", len(m))
	}
	m, err = c.GetMulti(nil)
	if wantErr(t, "GetMulti(no keys)", err, nil) && (m == nil || len(m) != 0) {
		t.Errorf("GetMulti(no keys): expected an empty map got %v", m)
	}
}

// checkConcurrency runs goroutines that each own a set of keys and check
// every reply against a model of what their keys must hold.
func checkConcurrency(t *T, e *env) {
	c := e.c
	const workers = 8
	const ops = 500
	const keysPerWorker = 12
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w) + 1))
			model := map[string][]byte{}
			flagsOf := map[string]uint32{}
			// counter[k] is true while k holds a number written by
			// incr/decr, which a server may pad with trailing spaces.
			counter := map[string]bool{}
			same := func(k string, got, want []byte) bool {
				if counter[k] {
					got = bytes.TrimRight(got, " ")
				}
				return bytes.Equal(got, want)
			}
			failures := 0
			fail := func(format string, args ...interface{}) {
				failures++
				if failures <= 5 {
					t.Errorf("worker %d: "+format, append([]interface{}{w}, args...)...)
				}
			}
			for j := 0; j < ops; j++ {
				k := e.key(fmt.Sprintf("conc:%d:%d", w, r.Intn(keysPerWorker)))
				op := r.Intn(100)
				switch {
				case op < 35: // set, numeric or not
					var v []byte
					if r.Intn(2) == 0 {
						v = []byte(strconv.FormatUint(uint64(r.Int63n(1000000)), 10))
					} else {
						// A letter first keeps it non-numeric.
						v = append([]byte("x"), randomBytes(r.Intn(300), r.Int63())...)
					}
					f := r.Uint32()
					if err := c.Set(&memcache.Item{Key: k, Value: v, Flags: f}); err != nil {
						fail("op %d Set(%s): expected <nil> got %s", j, k, errStr(err))
						continue
					}
					model[k] = v
					flagsOf[k] = f
					counter[k] = false
				case op < 65: // get
					it, err := c.Get(k)
					want, present := model[k]
					if !present {
						if err != memcache.ErrCacheMiss {
							fail("op %d Get(%s): expected ErrCacheMiss got %s", j, k, errStr(err))
						}
						continue
					}
					if err != nil {
						fail("op %d Get(%s): expected %s got %s", j, k, showBytes(want), errStr(err))
						continue
					}
					if !same(k, it.Value, want) || it.Flags != flagsOf[k] {
						fail("op %d Get(%s): expected %s flags %d got %s flags %d", j, k, showBytes(want), flagsOf[k], showBytes(it.Value), it.Flags)
					}
				case op < 80: // delete
					err := c.Delete(k)
					_, present := model[k]
					if present && err != nil {
						fail("op %d Delete(%s): expected <nil> got %s", j, k, errStr(err))
					} else if !present && err != memcache.ErrCacheMiss {
						fail("op %d Delete(%s): expected ErrCacheMiss got %s", j, k, errStr(err))
					}
					delete(model, k)
				default: // incr or decr
					delta := uint64(r.Intn(1000))
					decr := r.Intn(3) == 0
					var got uint64
					var err error
					if decr {
						got, err = c.Decrement(k, delta)
					} else {
						got, err = c.Increment(k, delta)
					}
					cur, present := model[k]
					if !present {
						if err != memcache.ErrCacheMiss {
							fail("op %d incr/decr(%s): expected ErrCacheMiss got %s", j, k, errStr(err))
						}
						continue
					}
					n, perr := strconv.ParseUint(strings.TrimRight(string(cur), " "), 10, 64)
					if perr != nil {
						if err == nil || !strings.HasPrefix(err.Error(), "memcache: client error: ") {
							fail("op %d incr/decr(%s) on %s: expected a client error got %s (value %d)", j, k, showBytes(cur), errStr(err), got)
						}
						continue
					}
					var want uint64
					if decr {
						if delta > n {
							want = 0
						} else {
							want = n - delta
						}
					} else {
						want = n + delta
					}
					if err != nil || got != want {
						fail("op %d incr/decr(%s) %d by %d: expected %d got %d err %s", j, k, n, delta, want, got, errStr(err))
						continue
					}
					model[k] = []byte(strconv.FormatUint(want, 10))
					counter[k] = true
				}
			}
			// Final state of every key.
			for i := 0; i < keysPerWorker; i++ {
				k := e.key(fmt.Sprintf("conc:%d:%d", w, i))
				it, err := c.Get(k)
				want, present := model[k]
				switch {
				case !present && err != memcache.ErrCacheMiss:
					fail("final Get(%s): expected ErrCacheMiss got %s", k, errStr(err))
				case present && err != nil:
					fail("final Get(%s): expected %s got %s", k, showBytes(want), errStr(err))
				case present && !same(k, it.Value, want):
					fail("final Get(%s): expected %s got %s", k, showBytes(want), showBytes(it.Value))
				}
			}
			if failures > 5 {
				t.Errorf("worker %d: %d failures in all", w, failures)
			}
		}(w)
	}
	wg.Wait()
}

func checkClose(t *T, e *env) {
	c := e.c
	k := e.key("close")
	set(t, c, k, []byte("before close"), 0, 0)
	wantErr(t, "Close()", c.Close(), nil)
	// The client reconnects after Close.
	wantItem(t, c, k, []byte("before close"), 0)
	// A second, independent client sees the same data.
	c2 := newClient(e.addr, 2)
	defer c2.Close()
	wantItem(t, c2, k, []byte("before close"), 0)
	set(t, c2, k, []byte("from second client"), 1, 0)
	wantItem(t, c, k, []byte("from second client"), 1)
}

// expiry stores items with short lifetimes at the start of the run and
// looks at them at the end, at least 3.5 s later. Expiry counts whole
// seconds, so a 2 s lifetime is over by then and a long one is not.
type expiry struct {
	start time.Time
	keys  map[string]string
}

func (x *expiry) k(e *env, name string) string { return e.key("exp:" + name) }

func (x *expiry) setup(t *T, e *env) {
	c := e.c
	v := []byte("short lived")

	// Set with a 2 s lifetime.
	set(t, c, x.k(e, "set2"), v, 1, 2)
	wantItem(t, c, x.k(e, "set2"), v, 1)
	// Add, Replace and CompareAndSwap with a 2 s lifetime.
	wantErr(t, "Add(exp 2)", c.Add(&memcache.Item{Key: x.k(e, "add2"), Value: v, Expiration: 2}), nil)
	set(t, c, x.k(e, "replace2"), v, 0, 0)
	wantErr(t, "Replace(exp 2)", c.Replace(&memcache.Item{Key: x.k(e, "replace2"), Value: v, Expiration: 2}), nil)
	set(t, c, x.k(e, "cas2"), v, 0, 0)
	if it, err := c.Get(x.k(e, "cas2")); wantErr(t, "Get", err, nil) {
		it.Expiration = 2
		wantErr(t, "CompareAndSwap(exp 2)", c.CompareAndSwap(it), nil)
	}
	// Touch shortens a lifetime, and lengthens one.
	set(t, c, x.k(e, "touch2"), v, 0, 0)
	wantErr(t, "Touch(2)", c.Touch(x.k(e, "touch2"), 2), nil)
	set(t, c, x.k(e, "touch-long"), v, 0, 2)
	wantErr(t, "Touch(300)", c.Touch(x.k(e, "touch-long"), 300), nil)
	set(t, c, x.k(e, "touch0"), v, 0, 2)
	wantErr(t, "Touch(0)", c.Touch(x.k(e, "touch0"), 0), nil)
	// GetAndTouch does the same.
	set(t, c, x.k(e, "gat2"), v, 5, 0)
	if it, err := c.GetAndTouch(x.k(e, "gat2"), 2); wantErr(t, "GetAndTouch(2)", err, nil) && string(it.Value) != string(v) {
		t.Errorf("GetAndTouch(2): expected %q got %q", v, it.Value)
	}
	set(t, c, x.k(e, "gat-long"), v, 6, 2)
	if it, err := c.GetAndTouch(x.k(e, "gat-long"), 300); wantErr(t, "GetAndTouch(300)", err, nil) && string(it.Value) != string(v) {
		t.Errorf("GetAndTouch(300): expected %q got %q", v, it.Value)
	}
	// An absolute Unix time 2 s ahead.
	abs := int32(time.Now().Unix() + 2)
	set(t, c, x.k(e, "abs"), v, 0, abs)
	// A long lifetime, to show expiry hits only the short ones.
	set(t, c, x.k(e, "long"), v, 7, 300)
	// Append keeps the item's lifetime.
	set(t, c, x.k(e, "append2"), v, 0, 2)
	wantErr(t, "Append", c.Append(&memcache.Item{Key: x.k(e, "append2"), Value: []byte("+"), Expiration: 300}), nil)
	// The wait in verify counts from the last store with a 2 s lifetime.
	x.start = time.Now()
	// A negative lifetime means already expired.
	set(t, c, x.k(e, "negative"), v, 0, -1)
	wantMiss(t, c, x.k(e, "negative"))

	for _, name := range []string{"add2", "replace2", "cas2", "touch2", "touch-long", "touch0", "abs", "long"} {
		k := x.k(e, name)
		if _, err := c.Get(k); err != nil {
			t.Errorf("Get(%s) right after storing: expected a hit got %s", k, errStr(err))
		}
	}
}

func (x *expiry) verify(t *T, e *env) {
	c := e.c
	if d := 3500*time.Millisecond - time.Since(x.start); d > 0 {
		time.Sleep(d)
	}
	for _, name := range []string{"set2", "add2", "replace2", "cas2", "touch2", "gat2", "abs", "append2", "negative"} {
		wantMiss(t, c, x.k(e, name))
	}
	v := []byte("short lived")
	wantItem(t, c, x.k(e, "touch-long"), v, 0)
	wantItem(t, c, x.k(e, "touch0"), v, 0)
	wantItem(t, c, x.k(e, "gat-long"), v, 6)
	wantItem(t, c, x.k(e, "long"), v, 7)
	// Expired keys are gone for every command, not only for get.
	k := x.k(e, "set2")
	wantErr(t, "Touch(expired)", c.Touch(k, 10), memcache.ErrCacheMiss)
	_, err := c.Increment(k, 1)
	wantErr(t, "Increment(expired)", err, memcache.ErrCacheMiss)
	wantErr(t, "Append(expired)", c.Append(&memcache.Item{Key: k, Value: []byte("x")}), memcache.ErrNotStored)
	wantErr(t, "Replace(expired)", c.Replace(&memcache.Item{Key: k, Value: []byte("x")}), memcache.ErrNotStored)
	wantErr(t, "Delete(expired)", c.Delete(k), memcache.ErrCacheMiss)
	m, err := c.GetMulti([]string{k, x.k(e, "long")})
	if wantErr(t, "GetMulti", err, nil) {
		if _, ok := m[k]; ok || len(m) != 1 {
			t.Errorf("GetMulti(expired, live): expected only the live key got %d items", len(m))
		}
	}
	// Add on an expired key succeeds.
	wantErr(t, "Add(expired key)", c.Add(&memcache.Item{Key: k, Value: []byte("new life"), Flags: 9}), nil)
	wantItem(t, c, k, []byte("new life"), 9)
}

// ---------------------------------------------------------------------------
// write / verify

func persistKey(i int) string { return "persist:" + strconv.Itoa(i) }

// splitmix64 is a small deterministic generator, so values depend only on
// SEED and i and not on the Go version's math/rand.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9E3779B97F4A7C15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// persistItem derives the value (1..4000 bytes) and flags of key i.
func persistItem(i int, seed int64) ([]byte, uint32) {
	s := splitmix64(uint64(seed)*0x100000001B3 ^ uint64(i)*0x9E3779B97F4A7C15)
	var n int
	switch i % 50 {
	case 0:
		n = 4000
	case 1:
		n = 1
	case 2:
		n = 256
	default:
		n = 1 + int(s.next()%4000)
	}
	v := make([]byte, n)
	for j := 0; j < n; j += 8 {
		w := s.next()
		for b := 0; b < 8 && j+b < n; b++ {
			v[j+b] = byte(w >> (8 * b))
		}
	}
	// Every byte value in the longer values, starting at an offset that
	// depends on i.
	if n >= 300 {
		off := int(s.next() % uint64(n-256))
		for b := 0; b < 256; b++ {
			v[off+b] = byte(b + i)
		}
	}
	// \r\n inside (and for some keys at the end of) the value.
	if n >= 2 {
		p := int(s.next() % uint64(n-1))
		v[p], v[p+1] = '\r', '\n'
		if i%7 == 0 {
			v[n-2], v[n-1] = '\r', '\n'
		}
	}
	if n >= 5 && i%11 == 0 {
		copy(v, "END\r\n")
	}
	flags := uint32(uint64(i) * 2654435761)
	if i%13 == 0 {
		flags = 0xFFFFFFFF - uint32(i)
	}
	return v, flags
}

func runWrite(addr string, n int, seed int64) int {
	const workers = 8
	c := newClient(addr, workers)
	defer c.Close()
	var mu sync.Mutex
	var failed []string
	nfailed := 0
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				v, f := persistItem(i, seed)
				if err := c.Set(&memcache.Item{Key: persistKey(i), Value: v, Flags: f}); err != nil {
					mu.Lock()
					nfailed++
					if len(failed) < 10 {
						failed = append(failed, fmt.Sprintf("%s: %v", persistKey(i), err))
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if nfailed > 0 {
		return failWith("write", failed, fmt.Sprintf("%d of %d stores failed", nfailed, n))
	}
	fmt.Printf("ok  wrote %d keys\n", n)
	return 0
}

func runVerify(addr string, n int, seed int64) int {
	c := newClient(addr, 2)
	defer c.Close()
	var problems []string
	bad := 0
	note := func(format string, args ...interface{}) {
		bad++
		if len(problems) < 5 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	for start := 0; start < n; start += 100 {
		end := start + 100
		if end > n {
			end = n
		}
		keys := make([]string, 0, end-start)
		for i := start; i < end; i++ {
			keys = append(keys, persistKey(i))
		}
		m, err := c.GetMulti(keys)
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL verify: GetMulti(%s..%s): %v\n", keys[0], keys[len(keys)-1], err)
			return 1
		}
		for i := start; i < end; i++ {
			k := persistKey(i)
			v, f := persistItem(i, seed)
			it, ok := m[k]
			switch {
			case !ok:
				note("%s: expected %d bytes flags %d got missing", k, len(v), f)
			case !bytes.Equal(it.Value, v):
				note("%s: expected %s got %s", k, showBytes(v), showBytes(it.Value))
			case it.Flags != f:
				note("%s: expected flags %d got %d", k, f, it.Flags)
			}
		}
		if len(m) > len(keys) {
			note("GetMulti(%s..): expected at most %d items got %d", keys[0], len(keys), len(m))
		}
	}
	if bad > 0 {
		return failWith("verify", problems, fmt.Sprintf("%d of %d keys missing or wrong", bad, n))
	}
	fmt.Printf("ok  verified %d keys\n", n)
	return 0
}

// failWith reports a failed write or verify on stderr: a "FAIL <mode>" line
// for each of the first problems, then one with the summary. Returns the
// exit code, 1.
func failWith(mode string, shown []string, summary string) int {
	for _, s := range shown {
		fmt.Fprintf(os.Stderr, "FAIL %s %s\n", mode, s)
	}
	fmt.Fprintf(os.Stderr, "FAIL %s: %s\n", mode, summary)
	return 1
}
