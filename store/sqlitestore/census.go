package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.Censuser = (*Store)(nil)

// censusDialect reads an envelope's text fields with json_extract, from
// a column that holds valid JSON only (an undecodable row counts under
// the type ""); SQLite's text order is byte order already.
var censusDialect = sqlq.CensusDialect{JSONText: "json_extract(CASE WHEN json_valid({col}) THEN {col} END, '$.{field}')"}

// Census counts what a deploy must serve, in one read transaction (one
// snapshot); see readmodel.Censuser.
func (s *Store) Census(ctx context.Context) (*readmodel.Census, error) {
	if err := s.check("census"); err != nil {
		return nil, err
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: census: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	c, err := sqlq.RunCensus(ctx, censusDialect, func(ctx context.Context, q string) (sqlq.Rows, error) {
		rows, err := tx.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		return sqlRows{rows}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return c, nil
}

// sqlRows is a *sql.Rows as sqlq.Rows.
type sqlRows struct{ *sql.Rows }

// Close closes the rows; an error there is Err's.
func (r sqlRows) Close() { _ = r.Rows.Close() }
