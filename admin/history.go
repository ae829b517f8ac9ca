package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/idemhq/idem/internal/engineaccess"
	"github.com/idemhq/idem/internal/history"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// SagaHistory is the answer of GET /api/sagas/{type}/{key}/history and of the
// console's GET /instances/{type}/{key}/history.json: a saga's whole
// journal, oldest first, with each entry's detail (see inspect.SagaHistory).
type SagaHistory = inspect.SagaHistory

// HistoryEntry is one journal entry of a SagaHistory: see its fields'
// documentation in package inspect.
type HistoryEntry = inspect.HistoryEntry

// HistoryEmitted is a message a step emitted. Sent is "sent" (the
// transport accepted it, or the store's own queue took it with the step's
// commit), "pending" (in the outbox, not sent yet) or "unknown" (no longer
// in the outbox, or a store that cannot tell).
type HistoryEmitted = inspect.HistoryEmitted

// writeHistory answers with k's SagaHistory, as a download when attach.
func (p *parts) writeHistory(w http.ResponseWriter, r *http.Request, k store.Key, attach bool) {
	ctx, cancel := p.storeCtx(r)
	defer cancel()
	in, err := p.load(ctx, k)
	if err == nil && in == nil {
		writeError(w, http.StatusNotFound, "no saga %s with key %q: list the sagas with GET /api/sagas?type=%s", k.SagaType, k.Key, k.SagaType)
		return
	}
	var h *SagaHistory
	if err == nil {
		h, err = p.history(ctx, k)
	}
	if err != nil {
		p.internalError(w, r, fmt.Sprintf("read the history of saga %s/%s", k.SagaType, k.Key), err)
		return
	}
	if attach {
		w.Header().Set("Content-Disposition", `attachment; filename="`+historyFileName(k.SagaType, k.Key)+`"`)
	}
	writeJSON(w, http.StatusOK, h)
}

// history reads k's journal and the sent state of what it emitted.
func (p *parts) history(ctx context.Context, k store.Key) (*SagaHistory, error) {
	j, err := p.st.Journal(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("journal %s/%s: %w", k.SagaType, k.Key, err)
	}
	history.FillDiffs(j, inspect.HistoryDiffLimit)
	return &SagaHistory{SagaType: k.SagaType, Key: k.Key, Entries: p.historyEntries(ctx, j)}, nil
}

// historyEntries are the journal's entries with the sent state of what
// they emitted.
func (p *parts) historyEntries(ctx context.Context, j []store.JournalEntry) []HistoryEntry {
	return inspect.HistoryEntries(j, p.sentStates(ctx, j))
}

// sentStates looks up the sent state of every message the journal says was
// emitted. A lookup that fails leaves them unknown: the history is still
// worth showing.
func (p *parts) sentStates(ctx context.Context, j []store.JournalEntry) map[string]inspect.SentState {
	ids := inspect.EmittedIDs(j)
	out := make(map[string]inspect.SentState, len(ids))
	if len(ids) == 0 {
		return out
	}
	if p.onStoreQueue() { // enqueued in the commit that journaled them
		for _, id := range ids {
			out[id] = inspect.SentState{State: inspect.SentYes}
		}
		return out
	}
	if err := inspect.OutboxSent(ctx, p.caps.outboxSent, ids, out); err != nil {
		p.log.WarnContext(ctx, "admin: read the outbox's sent state; shown as unknown", "error", err)
	}
	return out
}

// onStoreQueue tells whether the engine's transport is its store's own
// queue, which takes emitted messages in the commit that emits them.
func (p *parts) onStoreQueue() bool {
	q := p.caps.storeQueue
	tr := engineaccess.Transport(p.e)
	return q != nil && tr != nil && reflect.TypeOf(q).Comparable() && reflect.TypeOf(tr).Comparable() && any(q) == any(tr)
}

// historyRow is a journal entry as the instance page shows it.
type historyRow struct {
	HistoryEntry
	// PayloadText is the payload to show: indented when JSON, else its
	// text, quoted with Go escapes when it is not UTF-8.
	PayloadText string
	HeaderList  [][2]string
	Ops         []diffOp
	// EndReason is the reason an operator gave for ending the saga, on
	// the entry that ended it.
	EndReason string
	Duration  time.Duration
}

// diffOp is one operation of a diff, its value as compact JSON.
type diffOp struct {
	Op, Path, From, Value string
}

func payloadText(p json.RawMessage, encoding string) string {
	switch encoding {
	case "json":
		return prettyJSON(p)
	case "utf-8":
		var s string
		_ = json.Unmarshal(p, &s)
		return s
	case "base64":
		var s string
		_ = json.Unmarshal(p, &s)
		b, _ := base64.StdEncoding.DecodeString(s)
		q := strconv.Quote(string(b))
		return q[1 : len(q)-1]
	}
	return ""
}

// diffOps lists a JSON patch's operations; nil when it is none.
func diffOps(patch json.RawMessage) []diffOp {
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		From  string          `json:"from"`
		Value json.RawMessage `json:"value"`
	}
	if len(patch) == 0 || json.Unmarshal(patch, &ops) != nil {
		return nil
	}
	out := make([]diffOp, len(ops))
	for i, o := range ops {
		out[i] = diffOp{Op: o.Op, Path: o.Path, From: o.From, Value: compactJSON(o.Value)}
	}
	return out
}
