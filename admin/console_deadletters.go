package admin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// dlRow is a dead letter as the console's tables show it.
type dlRow struct {
	store.DeadLetter
	// SagaExists is true when the saga the dead letter names exists, so
	// that the console links only to sagas it can show.
	SagaExists bool
	// History sums up the replays (see History).
	History string
	// State is what became of the latest replay (store.DeadLetter.State).
	State store.DeadLetterState
}

// deadLetterRows makes the rows of ds, reading which of their sagas exist
// in one load. A load that fails leaves every saga unlinked rather than
// failing the page.
func (s *Server) deadLetterRows(ctx context.Context, ds []store.DeadLetter) []dlRow {
	rows := make([]dlRow, len(ds))
	var keys []store.Key
	for i := range ds {
		rows[i] = dlRow{DeadLetter: ds[i], History: History(&ds[i]), State: ds[i].State()}
		if ds[i].SagaType != "" {
			keys = append(keys, store.Key{SagaType: ds[i].SagaType, Key: ds[i].Key})
		}
	}
	if len(keys) == 0 {
		return rows
	}
	found, err := s.existing(ctx, keys)
	if err != nil {
		s.log.WarnContext(ctx, "console: read the sagas of dead letters", "error", err)
		return rows
	}
	for i := range rows {
		rows[i].SagaExists = found[store.Key{SagaType: rows[i].SagaType, Key: rows[i].Key}]
	}
	return rows
}

// existing reports which of keys are stored sagas, in one load.
func (s *Server) existing(ctx context.Context, keys []store.Key) (map[store.Key]bool, error) {
	uow, err := s.st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	res, err := uow.Load(ctx, &store.LoadParams{Keys: keys})
	if err != nil {
		return nil, err
	}
	out := make(map[store.Key]bool, len(res.Instances))
	for k := range res.Instances {
		out[k] = true
	}
	return out, nil
}

// bodyText is a dead letter's body as the console shows it, and what it
// is: indented JSON, the stored text itself (the template escapes it for
// HTML), or a hex dump of a body that is not UTF-8 — as idem dlq show
// prints it.
func bodyText(b []byte) (string, string) {
	switch {
	case len(b) == 0:
		return "", "empty"
	case json.Valid(b):
		return prettyJSON(b), "JSON"
	case utf8.Valid(b):
		return string(b), "text"
	}
	return hex.Dump(b), "binary, hex dump"
}

// reasonChips counts every reason within f's other filters: the chips show
// each reason and the total whatever reason f selects.
func (s *Server) reasonChips(ctx context.Context, f *inspect.DeadLetterFilter) (*DeadLetterCounts, error) {
	all := *f
	all.Reason, all.AsOf = "", ""
	return s.deadLetterCounts(ctx, &all)
}
