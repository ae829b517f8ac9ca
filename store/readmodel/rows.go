package readmodel

import "context"

// Tables that RowEstimator and RowCounter name, each a kind of row every
// store keeps (a SQL store's table idem_<name>).
const (
	TableInstances   = "instances"
	TableAttributes  = "saga_attributes"
	TableInbox       = "inbox"
	TableOutbox      = "outbox"
	TableTimers      = "timers"
	TableJournal     = "journal"
	TableDeadLetters = "dead_letters"
	TableQueue       = "queue"
	TableSchedules   = "schedules"
	TableTokens      = "tokens"
)

// RowEstimator is implemented by stores that can estimate how many rows
// each of their tables holds without reading the rows: pgstore from the
// planner's statistics, sqlitestore from a bounded probe of each table's
// b-tree, memstore from its maps. EstimateRows returns an estimate for each
// table the store has, by the names above; its cost does not grow with the
// tables' size. The admin's /metrics exports them as idem_store_rows.
type RowEstimator interface {
	EstimateRows(ctx context.Context) (map[string]int64, error)
}

// RowCounter is implemented by stores that count the rows of one table
// exactly up to a bound, reading at most limit rows (or index entries):
// CountRows returns the count when it is below limit, and limit when there
// are limit rows or more. An unknown table is an error. The console's
// overview uses it for the dead letters and timers stored, with
// RowEstimator beyond the bound.
type RowCounter interface {
	CountRows(ctx context.Context, table string, limit int64) (int64, error)
}
