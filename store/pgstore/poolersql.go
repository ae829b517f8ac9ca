package pgstore

import (
	"encoding/binary"
	"net"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Through a pooler in transaction mode a connection's server session
// changes from one transaction to the next, so no session setting holds,
// search_path included, and PgBouncer refuses it as a startup parameter.
// Idem's statements name their tables unqualified (they are in the
// schema the search path selects), and so do the functions they call.
// Open's pooled connections therefore qualify them on the wire: each SQL
// text the client sends (the Parse and Query messages) has the names of
// Idem's tables and functions prefixed with the quoted schema. Only the
// names the migrations create are touched, outside string literals,
// quoted identifiers and comments, and only where no schema names them
// already; the trigger functions, whose bodies the server runs, carry
// their search path themselves (migration 024).

var (
	createdTableRE = regexp.MustCompile(`(?i)\bCREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)
	createdFuncRE  = regexp.MustCompile(`(?i)\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+([a-z_][a-z0-9_]*)`)
	// sqlCommentRE is a migration's line comments, which may quote the
	// statements above ("CREATE OR REPLACE FUNCTION must …") and are no
	// part of them.
	sqlCommentRE = regexp.MustCompile(`--[^\n]*`)
)

// schemaObjects returns the names of the tables and functions Idem's
// migrations create, and idem_migrations.
var schemaObjects = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{"idem_migrations": true}
	ms, err := loadMigrations()
	if err != nil {
		panic("pgstore: read the embedded migrations: " + err.Error())
	}
	for _, m := range ms {
		for _, re := range []*regexp.Regexp{createdTableRE, createdFuncRE} {
			for _, g := range re.FindAllStringSubmatch(sqlCommentRE.ReplaceAllString(m.tx, ""), -1) {
				names[strings.ToLower(g[1])] = true
			}
		}
	}
	return names
})

// qualify returns sql with every unqualified name of schemaObjects
// outside literals, quoted identifiers and comments prefixed with the
// quoted schema.
func qualify(sql, schema string) string {
	objs := schemaObjects()
	prefix := pgx.Identifier{schema}.Sanitize() + "."
	var b strings.Builder
	last := 0 // sql[last:i] is not yet copied to b
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'':
			i = skipQuoted(sql, i, '\'', i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e'))
		case c == '"':
			i = skipQuoted(sql, i, '"', false)
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(sql)
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			if j := strings.Index(sql[i+2:], "*/"); j >= 0 {
				i += j + 4
			} else {
				i = len(sql)
			}
		case c == '$':
			i = skipDollar(sql, i)
		case isIdentStart(c):
			j := i + 1
			for j < len(sql) && isIdentPart(sql[j]) {
				j++
			}
			if objs[strings.ToLower(sql[i:j])] && !afterDot(sql, i) {
				b.WriteString(sql[last:i])
				b.WriteString(prefix)
				last = i
			}
			i = j
		default:
			i++
		}
	}
	if last == 0 {
		return sql
	}
	b.WriteString(sql[last:])
	return b.String()
}

func isIdentStart(c byte) bool {
	return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || c >= 0x80
}

func isIdentPart(c byte) bool {
	return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$'
}

// afterDot reports whether the name at i follows a dot: it is qualified
// already, or a column of a table.
func afterDot(sql string, i int) bool {
	for i--; i >= 0; i-- {
		switch sql[i] {
		case ' ', '\t', '\n', '\r':
			continue
		case '.':
			return true
		}
		return false
	}
	return false
}

// skipQuoted returns the index after the literal or quoted identifier
// opened by q at i (a doubled q stays inside; with backslash, as in an
// escape string (E'…'), a backslash escapes the next byte).
func skipQuoted(sql string, i int, q byte, backslash bool) int {
	for j := i + 1; j < len(sql); j++ {
		switch {
		case backslash && sql[j] == '\\':
			j++
		case sql[j] == q && j+1 < len(sql) && sql[j+1] == q:
			j++
		case sql[j] == q:
			return j + 1
		}
	}
	return len(sql)
}

// skipDollar returns the index after the dollar-quoted string opened at
// i, or after the $ when it opens none (a parameter such as $1).
func skipDollar(sql string, i int) int {
	j := i + 1
	for j < len(sql) && sql[j] != '$' && (isIdentPart(sql[j]) && sql[j] != '$') {
		j++
	}
	if j >= len(sql) || sql[j] != '$' || (j > i+1 && sql[i+1] >= '0' && sql[i+1] <= '9') {
		return i + 1
	}
	tag := sql[i : j+1]
	if k := strings.Index(sql[j+1:], tag); k >= 0 {
		return j + 1 + k + len(tag)
	}
	return len(sql)
}

// qualifyingConn is a connection to a pooler whose Write qualifies the SQL
// text of the Parse and Query messages it sends (qualify). The first
// message of a connection, its startup message, has no type byte.
type qualifyingConn struct {
	net.Conn
	schema  string
	started bool
	pending []byte // the start of a message not yet complete
	out     []byte
}

// Write sends p's complete messages, rewritten, and keeps the rest for
// the next Write. It reports p written in full when they are sent.
func (c *qualifyingConn) Write(p []byte) (int, error) {
	c.pending = append(c.pending, p...)
	c.out = c.out[:0]
	for {
		n, ok := c.nextLen()
		if !ok {
			break
		}
		msg := c.pending[:n]
		if c.started && (msg[0] == 'P' || msg[0] == 'Q') {
			c.out = append(c.out, c.rewrite(msg)...)
		} else {
			c.out = append(c.out, msg...)
		}
		c.started = true
		c.pending = c.pending[n:]
	}
	if len(c.pending) == 0 {
		c.pending = nil
	}
	if len(c.out) == 0 {
		return len(p), nil
	}
	if _, err := c.Conn.Write(c.out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// nextLen is the length of the first pending message when it is complete.
func (c *qualifyingConn) nextLen() (int, bool) {
	head := 1
	if !c.started {
		head = 0
	}
	if len(c.pending) < head+4 {
		return 0, false
	}
	n := head + int(binary.BigEndian.Uint32(c.pending[head:]))
	return n, len(c.pending) >= n
}

// rewrite returns the Parse (name, query, parameter types) or Query
// (query) message msg with its query qualified.
func (c *qualifyingConn) rewrite(msg []byte) []byte {
	body := msg[5:]
	start := 0
	if msg[0] == 'P' {
		k := indexNUL(body)
		if k < 0 {
			return msg
		}
		start = k + 1
	}
	end := indexNUL(body[start:])
	if end < 0 {
		return msg
	}
	end += start
	sql := string(body[start:end])
	q := qualify(sql, c.schema)
	if q == sql {
		return msg
	}
	out := make([]byte, 0, len(msg)+len(q)-len(sql))
	out = append(out, msg[0], 0, 0, 0, 0)
	out = append(out, body[:start]...)
	out = append(out, q...)
	out = append(out, body[end:]...)
	binary.BigEndian.PutUint32(out[1:5], uint32(len(out)-1))
	return out
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
