package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.Censuser = (*Store)(nil)

// censusDialect reads an envelope's text fields with ->>, and orders by
// bytes with the C collation.
var censusDialect = sqlq.CensusDialect{JSONText: "{col}->>'{field}'", Bytes: ` COLLATE "C"`}

// Census counts what a deploy must serve, from one repeatable-read
// snapshot; see readmodel.Censuser.
func (s *Store) Census(ctx context.Context) (*readmodel.Census, error) {
	if err := s.check("census"); err != nil {
		return nil, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("pgstore: census: %w", translate(err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	c, err := sqlq.RunCensus(ctx, censusDialect, func(ctx context.Context, sql string) (sqlq.Rows, error) {
		return tx.Query(ctx, sql)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", translate(err))
	}
	return c, nil
}
