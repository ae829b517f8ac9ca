package pgstore

import (
	"context"
	"time"
)

// defaultNotifySpacing is the least time between two NOTIFYs of one
// store (Store.notifySpacing).
const defaultNotifySpacing = 10 * time.Millisecond

// How a commit that enqueued messages wakes the receivers: at once in
// this process (wakeReceivers), and through NOTIFY in others. NOTIFY inside a
// transaction takes PostgreSQL's global notification lock at its commit
// and serialises the commits that carry one; a NOTIFY of its own costs a
// round trip and a commit per unit of work. So a store sends at most one
// NOTIFY per notifySpacing, and sends it inside a unit of work's commit
// when it can:
//
//   - a commit that enqueues (or releases flow-control holds, which may
//     let another replica's waiting message in) carries the NOTIFY in its
//     pipeline when none was reserved for notifySpacing (reserveNotify):
//     no round trip, no commit of its own, and at most one commit per
//     notifySpacing per process takes the lock;
//   - a commit that enqueues while one was sent more recently asks the
//     notifier, which sends one notifySpacing after the last, unless a
//     unit of work sent after that commit ended carried one (its NOTIFY
//     is then later than the commit's rows, and wakes the receivers to
//     them).
//
// Under load, the units of work carry every NOTIFY and the notifier sends
// none; an idle receiver in another process learns of new messages at
// most notifySpacing late; a process that dies in between leaves them to
// find the messages at their next poll (Config.PollInterval).

// The notification times are nanoseconds on the store's monotonic clock
// (notifyNow), so that a step of the wall clock cannot hold NOTIFYs back.

// notifyNow is the time on the store's monotonic clock.
func (s *Store) notifyNow() int64 { return int64(time.Since(s.notifyBase)) }

// reserveNotify reserves the NOTIFY for a commit about to be sent, when
// none was reserved for notifySpacing: of the commits built at once, one
// carries it. It returns the reservation's time, which is before the
// commit's.
func (s *Store) reserveNotify() (int64, bool) {
	now := s.notifyNow()
	for {
		last := s.notifyClaimed.Load()
		if now-last < int64(s.notifySpacing) {
			return 0, false
		}
		if s.notifyClaimed.CompareAndSwap(last, now) {
			return now, true
		}
	}
}

// notifiedAt records a NOTIFY sent at sent (notifyNow) and committed.
func (s *Store) notifiedAt(sent int64) {
	for {
		cur := s.notifySent.Load()
		if cur >= sent || s.notifySent.CompareAndSwap(cur, sent) {
			return
		}
	}
}

// notifySoon wakes the receivers of this schema's queue after a commit that
// enqueued messages (or released holds) without carrying a NOTIFY: at once
// in this process, and through the notifier in others.
func (s *Store) notifySoon() {
	now := s.notifyNow()
	for {
		cur := s.notifyWanted.Load()
		if cur >= now || s.notifyWanted.CompareAndSwap(cur, now) {
			break
		}
	}
	s.lmu.Lock()
	if !s.notifyOn && !s.closed.Load() {
		s.notifyOn = true
		s.lwg.Add(1)
		go s.notifier()
	}
	s.lmu.Unlock()
	s.wakeReceivers()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// owed reports whether a commit that wanted a NOTIFY ended after the
// last NOTIFY that committed was sent.
func (s *Store) owed() bool { return s.notifyWanted.Load() >= s.notifySent.Load() }

// notifier sends the NOTIFYs the commits asked for, one notifySpacing
// after the last one sent or reserved, unless a unit of work sent after the latest
// request carried one meanwhile; when the store closes, it sends the one
// still owed.
func (s *Store) notifier() {
	defer s.lwg.Done()
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-s.bg.Done():
			s.flushNotify()
			return
		case <-s.notify:
		}
		// One notifySpacing after the last NOTIFY sent or reserved by a
		// commit (in flight, it may be the one this request needs).
		last := max(s.notifySent.Load(), s.notifyClaimed.Load())
		if wait := time.Duration(last + int64(s.notifySpacing) - s.notifyNow()); wait > 0 {
			t.Reset(wait)
			select {
			case <-s.bg.Done():
				t.Stop()
				s.flushNotify()
				return
			case <-t.C:
			}
		}
		if !s.owed() {
			continue // a later unit of work carried one
		}
		s.sendNotify(s.bg)
	}
}

// sendNotify sends a NOTIFY of its own.
func (s *Store) sendNotify(ctx context.Context) {
	sent := s.notifyNow()
	if _, err := s.pool.Exec(ctx, notifySQL, s.cfg.Schema); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("queue notification failed; other processes find the messages at their next poll", "error", err)
		}
		return
	}
	s.notifiedAt(sent)
}

// flushNotify sends the NOTIFY still owed when the store closes (the pool
// closes after the notifier returns), within a second.
func (s *Store) flushNotify() {
	if !s.owed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.sendNotify(ctx)
}
