package pgstore_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/pgstore"
)

// BenchmarkDomainTx compares the ledger saga with and without its ledger
// insert in the unit of work (a savepoint, the insert and its release: three
// round trips per message). Reported as messages per second.
func BenchmarkDomainTx(b *testing.B) {
	for _, withSQL := range []bool{false, true} {
		name := map[bool]string{false: "pure", true: "ledger-insert"}[withSQL]
		b.Run(name, func(b *testing.B) {
			const n = 5000
			var total float64
			for range b.N {
				st := openStore(b, pgstore.Config{})
				if _, err := schemaConn(b, st.Schema()).Exec(context.Background(), enginetest.LedgerTable); err != nil {
					b.Fatal(err)
				}
				var exec func(c *saga.Context[enginetest.Account], q string, args ...any) (bool, error)
				if withSQL {
					exec = func(c *saga.Context[enginetest.Account], q string, args ...any) (bool, error) {
						tx, ok := pgstore.TxFrom(c)
						if !ok {
							return false, nil
						}
						_, err := tx.Exec(c.Context(), q, args...)
						return true, err
					}
				}
				total += float64(n) / enginetest.DomainTxThroughput(b, st, n, exec).Seconds()
			}
			b.ReportMetric(total/float64(b.N), "msgs/s")
		})
	}
}
