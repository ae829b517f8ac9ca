package pgstore

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"testing"
)

// qualify names Idem's tables and functions with the schema, and nothing
// else: not literals, quoted identifiers, comments, dollar-quoted
// bodies, savepoints, index names, columns or names qualified already.
func TestQualifyNamesOnlyIdemsObjects(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT * FROM idem_queue WHERE x = 'idem_queue'`, `SELECT * FROM "s".idem_queue WHERE x = 'idem_queue'`},
		{`SELECT pg_notify('idem_queue', $1::text)`, `SELECT pg_notify('idem_queue', $1::text)`},
		{`SAVEPOINT idem_claim`, `SAVEPOINT idem_claim`},
		{`SELECT 1 FROM "s"."idem_instances", s2 . idem_timers`, `SELECT 1 FROM "s"."idem_instances", s2 . idem_timers`},
		{`SET x = greatest(idem_limit_counters.tokens, 1)`, `SET x = greatest("s".idem_limit_counters.tokens, 1)`},
		{`SELECT E'it\'s idem_queue', 'a''idem_queue'`, `SELECT E'it\'s idem_queue', 'a''idem_queue'`},
		{`SELECT $$ idem_queue $$, $t$ idem_queue $t$, $1 FROM IDEM_QUEUE`, `SELECT $$ idem_queue $$, $t$ idem_queue $t$, $1 FROM "s".IDEM_QUEUE`},
		{"SELECT 1 -- idem_queue\nFROM idem_outbox /* idem_queue */", "SELECT 1 -- idem_queue\nFROM \"s\".idem_outbox /* idem_queue */"},
		{`CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_queue_fair ON idem_queue (part)`, `CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_queue_fair ON "s".idem_queue (part)`},
		{`SELECT idem_expect(1, 1, 'x')`, `SELECT "s".idem_expect(1, 1, 'x')`},
		{`SELECT 'unterminated idem_queue`, `SELECT 'unterminated idem_queue`},
		{"SELECT '\xff' FROM idem_queue\xfe", "SELECT '\xff' FROM idem_queue\xfe"},
	} {
		if got := qualify(c.in, "s"); got != c.want {
			t.Errorf("qualify(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
	if got, want := qualify(`SELECT 1 FROM idem_queue`, `We"ird<script>`), `SELECT 1 FROM "We""ird<script>".idem_queue`; got != want {
		t.Errorf("a hostile schema name: got %q, want %q", got, want)
	}
}

// wireLog is a net.Conn that records what is written to it.
type wireLog struct {
	net.Conn
	buf bytes.Buffer
}

func (w *wireLog) Write(p []byte) (int, error) { return w.buf.Write(p) }

// A qualifyingConn passes the startup message and other messages on as
// they are, rewrites the query of Parse and Query messages with their
// lengths, and keeps a message split across writes until it is whole.
func TestQualifyingConnRewritesParseAndQuery(t *testing.T) {
	msg := func(typ byte, body ...[]byte) []byte {
		b := []byte{typ, 0, 0, 0, 0}
		for _, p := range body {
			b = append(b, p...)
		}
		binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
		return b
	}
	startup := []byte{0, 0, 0, 12, 0, 3, 0, 0, 'P', 0, 'Q', 0} // a startup message whose bytes look like types
	parse := msg('P', []byte("\x00SELECT 1 FROM idem_queue WHERE seq = $1\x00"), []byte{0, 1, 0, 0, 0, 20})
	sync := msg('S')
	query := msg('Q', []byte("DELETE FROM idem_timers\x00"))
	var in []byte
	for _, m := range [][]byte{startup, parse, sync, query} {
		in = append(in, m...)
	}
	w := &wireLog{}
	c := &qualifyingConn{Conn: w, schema: "s"}
	for _, chunk := range [][]byte{in[:3], in[3:20], in[20:]} {
		if n, err := c.Write(chunk); err != nil || n != len(chunk) {
			t.Fatalf("Write(%d bytes) = %d, %v", len(chunk), n, err)
		}
	}
	var want []byte
	for _, m := range [][]byte{startup,
		msg('P', []byte("\x00SELECT 1 FROM \"s\".idem_queue WHERE seq = $1\x00"), []byte{0, 1, 0, 0, 0, 20}),
		sync, msg('Q', []byte("DELETE FROM \"s\".idem_timers\x00"))} {
		want = append(want, m...)
	}
	if !bytes.Equal(w.buf.Bytes(), want) {
		t.Errorf("wire:\n got %q\nwant %q", w.buf.Bytes(), want)
	}
}

// The names qualified through a pooler are the tables and functions the
// migrations create, and nothing their comments mention: a word of a
// comment ("CREATE OR REPLACE FUNCTION must …" in migration 024) would be
// qualified in the application's own statements too.
func TestSchemaObjectsAreIdemsOwn(t *testing.T) {
	objs := schemaObjects()
	for name := range objs {
		if !strings.HasPrefix(name, "idem_") {
			t.Errorf("qualified through a pooler: %q, which no migration creates as a table or function", name)
		}
	}
	for _, want := range []string{"idem_instances", "idem_queue", "idem_migrations", "idem_journal_guard"} {
		if !objs[want] {
			t.Errorf("%s is not qualified through a pooler", want)
		}
	}
}
