package sqlq

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemhq/idem/store/readmodel"
)

// CensusDialect is what differs between the SQL stores' census queries:
// how a text column of an envelope is read from its JSON (an expression
// with {col} and {field}), and the collation that orders by bytes.
type CensusDialect struct {
	JSONText string
	Bytes    string
}

// CensusQuery is one of the census's grouped queries and how a row of it
// goes into the Census.
type CensusQuery struct {
	What string
	SQL  string
	Scan func(c *readmodel.Census, scan func(...any) error) error
}

// CensusQueries are readmodel.Censuser's queries in d's dialect: each one
// groups one table (the timers joined with their live sagas) and orders
// the groups by bytes.
func CensusQueries(d CensusDialect) []CensusQuery {
	typ := func(col string) string {
		return "coalesce(" + strings.NewReplacer("{col}", col, "{field}", "type").Replace(d.JSONText) + ", '')"
	}
	by := func(cols ...string) string {
		for i, c := range cols {
			cols[i] = c + d.Bytes
		}
		return " ORDER BY " + strings.Join(cols, ", ")
	}
	return []CensusQuery{
		{"states", `SELECT * FROM (SELECT saga_type AS a, state AS b, schema_version AS v, count(*) AS n FROM idem_instances WHERE finished_at IS NULL GROUP BY 1, 2, 3) g` + by("a", "b") + `, v`,
			func(c *readmodel.Census, scan func(...any) error) error {
				var r readmodel.LiveStateCount
				err := scan(&r.SagaType, &r.State, &r.SchemaVersion, &r.Count)
				c.States = append(c.States, r)
				return err
			}},
		{"timers", `SELECT * FROM (SELECT t.saga_type AS a, coalesce(i.state, '') AS b, t.name AS c, ` + typ("t.envelope") + ` AS d, count(*) AS n FROM idem_timers t
LEFT JOIN idem_instances i ON i.saga_type = t.saga_type AND i.key = t.key AND i.finished_at IS NULL
GROUP BY 1, 2, 3, 4) g` + by("a", "b", "c", "d"),
			func(c *readmodel.Census, scan func(...any) error) error {
				var r readmodel.TimerCount
				err := scan(&r.SagaType, &r.State, &r.Name, &r.EventType, &r.Count)
				c.Timers = append(c.Timers, r)
				return err
			}},
		{"messages", `SELECT type, place, n FROM (
  SELECT ` + typ("envelope") + ` AS type, '` + readmodel.InOutbox + `' AS place, count(*) AS n FROM idem_outbox WHERE sent_at IS NULL GROUP BY 1
  UNION ALL
  SELECT ` + typ("envelope") + `, '` + readmodel.InQueue + `', count(*) FROM idem_queue GROUP BY 1
) m` + by("type", "place"),
			func(c *readmodel.Census, scan func(...any) error) error {
				var r readmodel.MessageCount
				err := scan(&r.Type, &r.Where, &r.Count)
				c.Messages = append(c.Messages, r)
				return err
			}},
		{"attributes", `SELECT * FROM (SELECT saga_type AS a, name AS b, count(*) AS n FROM idem_saga_attributes GROUP BY 1, 2) g` + by("a", "b"),
			func(c *readmodel.Census, scan func(...any) error) error {
				var r readmodel.AttributeCount
				err := scan(&r.SagaType, &r.Name, &r.Count)
				c.Attributes = append(c.Attributes, r)
				return err
			}},
	}
}

// Rows is what both stores' query results offer.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// RunCensus runs d's census queries with query, in order, into one Census.
func RunCensus(ctx context.Context, d CensusDialect, query func(ctx context.Context, sql string) (Rows, error)) (*readmodel.Census, error) {
	c := &readmodel.Census{States: []readmodel.LiveStateCount{}, Timers: []readmodel.TimerCount{}, Messages: []readmodel.MessageCount{}, Attributes: []readmodel.AttributeCount{}}
	for _, q := range CensusQueries(d) {
		if err := runCensusQuery(ctx, c, q, query); err != nil {
			return nil, fmt.Errorf("census: %s: %w", q.What, err)
		}
	}
	return c, nil
}

func runCensusQuery(ctx context.Context, c *readmodel.Census, q CensusQuery, query func(ctx context.Context, sql string) (Rows, error)) error {
	rows, err := query(ctx, q.SQL)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := q.Scan(c, rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
