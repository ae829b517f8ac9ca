package torture

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the checker's reads

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

func isPostgres(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// backend is what a process of the run opens: the store (a SQLite file
// path, or a PostgreSQL URL with schema) and the transport, the store
// itself when transport is empty, otherwise a broker through open with bo.
type backend struct {
	store, schema, transport string
	bo                       BrokerOptions
	open                     TransportOpener
	// worker opens the store without migrating it (the driver did).
	worker bool
}

// openWith opens b with logger; the returned func closes everything.
func (b *backend) openWith(ctx context.Context, logger *slog.Logger) (store.Store, transport.Transport, func(), error) {
	bo := b.bo
	lease := bo.Lease
	bo.Logger = logger
	var q store.Queue
	if isPostgres(b.store) {
		s, err := pgstore.Open(ctx, b.store, &pgstore.Config{Schema: b.schema, Migrate: !b.worker, Lease: lease, PollInterval: 100 * time.Millisecond, Logger: logger})
		if err != nil {
			return nil, nil, nil, err
		}
		q = s
	} else {
		s, err := sqlitestore.Open(ctx, b.store, &sqlitestore.Config{SkipMigrate: b.worker, Lease: lease, PollInterval: 50 * time.Millisecond, BusyTimeout: 10 * time.Second, Logger: logger})
		if err != nil {
			return nil, nil, nil, err
		}
		q = s
	}
	if b.transport == "" {
		return q, q, func() { q.Close() }, nil
	}
	if b.open == nil {
		q.Close()
		return nil, nil, nil, fmt.Errorf("--transport %s: no broker transport is linked into this binary (no TransportOpener)", redactURL(b.transport))
	}
	tr, release, err := b.open(ctx, b.transport, bo)
	if err != nil {
		q.Close()
		return nil, nil, nil, err
	}
	return q, tr, func() { tr.Close(); release(); q.Close() }, nil
}

// openDB opens the store's database for the checker's reads.
func openDB(storeSpec, schema string) (*sql.DB, error) {
	if isPostgres(storeSpec) {
		u, err := url.Parse(storeSpec)
		if err != nil {
			return nil, fmt.Errorf("parse the PostgreSQL URL: %w", err)
		}
		if direct := u.Query().Get(pgstore.DirectURLParam); direct != "" { // the store's URL is a pooler's
			if u, err = url.Parse(direct); err != nil {
				return nil, fmt.Errorf("parse the %s parameter of the PostgreSQL URL: %w", pgstore.DirectURLParam, err)
			}
		}
		qv := u.Query()
		qv.Set("search_path", pgx.Identifier{schema}.Sanitize())
		u.RawQuery = qv.Encode()
		return sql.Open("pgx", u.String())
	}
	db, err := sql.Open("sqlite", "file:"+storeSpec+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2)
	return db, nil
}
