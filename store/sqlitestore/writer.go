package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemhq/idem/store"
)

// SQLite lets one connection write at a time. A Store therefore writes
// through one connection, owned by one goroutine (writeLoop), and every
// write (a unit of work's Commit, a publish, a claim, an ack) is a request
// to it. Requests that arrive while a transaction is being written and
// synced wait and then form the next group: one BEGIN IMMEDIATE, one
// SAVEPOINT per request so that a failing request rolls back alone, one
// COMMIT and so one fsync for the group. Each request is told its own
// outcome only after the group's COMMIT returned.

// maxGroup bounds how many requests share one transaction.
const maxGroup = 128

// Request states: the writer runs a pending request; a caller whose context
// ends first marks it cancelled, and the writer skips it.
const (
	reqPending int32 = iota
	reqRunning
	reqCancelled
)

// writeOpts describe a request.
type writeOpts uint8

const (
	// wakeConsumers wakes the consumers waiting in Receive after the
	// commit: the request made queue rows visible.
	wakeConsumers writeOpts = 1 << iota
	// leaseOnly marks a request that only takes leases (the claims of
	// Receive, ClaimOutbox and ClaimTimers). Losing one to a power failure
	// is harmless, since its holder is gone too and the rows become
	// claimable again, so a group of such requests only commits with
	// synchronous=NORMAL: no fsync of its own; the next durable commit
	// syncs it with the rest of the write-ahead log, in order.
	leaseOnly
)

// writeFunc performs one request's writes in the writer's transaction. It
// must not keep w after it returns.
type writeFunc func(w *writer) error

type writeReq struct {
	fn    writeFunc
	opts  writeOpts
	state atomic.Int32
	err   error
	done  chan struct{}
}

// writer runs statements on the writing connection. Statements ignore the
// callers' contexts: cancelling one would interrupt the whole group's
// transaction.
type writer struct {
	s      *Store
	normal bool // the connection is at synchronous=NORMAL
}

func (w *writer) stmt(q string) (*sql.Stmt, error) {
	if st, ok := w.s.stmts[q]; ok {
		return st, nil
	}
	st, err := w.s.wconn.PrepareContext(context.Background(), q)
	if err != nil {
		return nil, err
	}
	w.s.stmts[q] = st
	return st, nil
}

// exec runs q and returns the number of rows it changed.
func (w *writer) exec(q string, args ...any) (int64, error) {
	st, err := w.stmt(q)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(context.Background(), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (w *writer) query(q string, args ...any) (*sql.Rows, error) {
	st, err := w.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(context.Background(), args...)
}

func (w *writer) raw(q string) error {
	_, err := w.s.wconn.ExecContext(context.Background(), q)
	return err
}

// write runs fn in the writer's next transaction and returns its error, or
// the commit's. When ctx ends before the writer started fn, write returns
// ctx's error and fn never runs; once started, write waits for the outcome.
func (s *Store) write(ctx context.Context, op string, opts writeOpts, fn writeFunc) error {
	if err := s.check(op); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &writeReq{fn: fn, opts: opts, done: make(chan struct{})}
	select {
	case s.writes <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return s.check(op)
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqPending, reqCancelled) {
			return ctx.Err()
		}
		<-r.done
		return r.err
	}
}

func (s *Store) writeLoop() {
	defer close(s.writerDone)
	w := &writer{s: s}
	for {
		var group []*writeReq
		select {
		case r := <-s.writes:
			group = append(group, r)
		case <-s.done:
			return
		}
	collect:
		for len(group) < maxGroup {
			select {
			case r := <-s.writes:
				group = append(group, r)
			default:
				break collect
			}
		}
		w.run(group)
	}
}

func (r *writeReq) finish(err error) {
	r.err = err
	close(r.done)
}

// run writes one group in one transaction.
func (w *writer) run(group []*writeReq) {
	if err := w.sync(group); err != nil {
		w.abort(group, nil, err)
		return
	}
	if err := w.raw(`BEGIN IMMEDIATE`); err != nil {
		w.abort(group, nil, err)
		return
	}
	pending := 0
	for _, r := range group {
		if r.state.Load() == reqPending {
			pending++
		}
	}
	alone := pending == 1 // no savepoint needed: the transaction is the request's
	var ok []*writeReq
	for i, r := range group {
		if !r.state.CompareAndSwap(reqPending, reqRunning) {
			continue // its caller gave up
		}
		err, broken := w.apply(r, alone)
		if broken != nil {
			// SQLite rolled the whole transaction back (an I/O error, a
			// full disk): nothing of the group was written.
			r.finish(cmp.Or(err, broken))
			w.abort(group[i+1:], ok, broken)
			return
		}
		if err != nil {
			r.finish(err)
			continue
		}
		ok = append(ok, r)
	}
	if len(ok) == 0 {
		_ = w.raw(`ROLLBACK`)
		return
	}
	if err := w.raw(`COMMIT`); err != nil {
		// The outcome may be unknown (an I/O error during the commit):
		// the callers must not assume their writes were discarded.
		_ = w.raw(`ROLLBACK`)
		err = fmt.Errorf("commit: %w", w.s.busy(err))
		for _, r := range ok {
			r.finish(err)
		}
		return
	}
	w.s.commits.Add(1)
	wake := false
	for _, r := range ok {
		wake = wake || r.opts&wakeConsumers != 0
		r.finish(nil)
	}
	if wake {
		w.s.notify()
	}
}

// apply runs one request inside the open transaction, within a savepoint
// unless it is alone in it, so that its failure undoes only its own writes.
// It returns the request's error, and broken when the transaction can no
// longer be used.
func (w *writer) apply(r *writeReq, alone bool) (err, broken error) {
	if alone {
		return r.fn(w), nil
	}
	if err := w.raw(`SAVEPOINT idem_request`); err != nil {
		return nil, err
	}
	if err := r.fn(w); err != nil {
		if rerr := w.raw(`ROLLBACK TO idem_request`); rerr != nil {
			return err, rerr
		}
		if rerr := w.raw(`RELEASE idem_request`); rerr != nil {
			return err, rerr
		}
		return err, nil
	}
	if err := w.raw(`RELEASE idem_request`); err != nil {
		return nil, err
	}
	return nil, nil
}

// sync sets the connection's synchronous mode for group: FULL, unless every
// request in it is leaseOnly.
func (w *writer) sync(group []*writeReq) error {
	normal := true
	for _, r := range group {
		if r.opts&leaseOnly == 0 && r.state.Load() == reqPending {
			normal = false
		}
	}
	if normal == w.normal {
		return nil
	}
	q := `PRAGMA synchronous = FULL`
	if normal {
		q = `PRAGMA synchronous = NORMAL`
	}
	if err := w.raw(q); err != nil {
		return fmt.Errorf("set synchronous mode: %w", err)
	}
	w.normal = normal
	return nil
}

// abort ends a group whose transaction failed or never began: the
// requests that succeeded in it and those not yet run get err; nothing was
// committed.
func (w *writer) abort(rest, ok []*writeReq, err error) {
	_ = w.raw(`ROLLBACK`) // fails harmlessly when no transaction is open
	err = fmt.Errorf("transaction rolled back: %w", w.s.busy(err))
	for _, r := range ok {
		r.finish(err)
	}
	for _, r := range rest {
		if r.state.CompareAndSwap(reqPending, reqRunning) {
			r.finish(err)
		}
	}
}

// busy explains SQLITE_BUSY and maps a stale snapshot onto ErrConflict.
func (s *Store) busy(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch {
	case se.Code() == sqlite3.SQLITE_BUSY_SNAPSHOT:
		return fmt.Errorf("%w: %v", store.ErrConflict, err)
	case se.Code()&0xff == sqlite3.SQLITE_BUSY:
		return fmt.Errorf("%w: another connection held the database's write lock for longer than Config.BusyTimeout (%v)", err, s.cfg.BusyTimeout)
	}
	return err
}

// notify wakes the consumers waiting in Receive.
func (s *Store) notify() {
	s.wmu.Lock()
	close(s.wake)
	s.wake = make(chan struct{})
	s.wmu.Unlock()
}

func (s *Store) wakeChan() chan struct{} {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.wake
}

// isUniqueViolation reports whether err is a primary key or unique
// constraint violation.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}
