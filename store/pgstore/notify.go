package pgstore

import (
	"context"
	"time"
)

// defaultNotifySpacing is the least time between two NOTIFYs of one
// store (Store.notifySpacing).
const defaultNotifySpacing = 10 * time.Millisecond

// How a commit that enqueued messages (or released flow-control holds,
// which may let another replica's waiting message in) wakes the
// receivers: at once in this process (wakeReceivers), and through NOTIFY
// in others, sent by one goroutine (the notifier) on a connection of its
// own, at most one per notifySpacing. A request when none was sent for
// notifySpacing is sent at once; the requests that follow within the
// spacing share one NOTIFY sent when it ends (a NOTIFY sent after a
// commit ended wakes the receivers to its rows). So a burst of commits
// costs one NOTIFY per notifySpacing per process, not one round trip
// and one commit each, and an idle receiver in another process learns of
// new messages at most notifySpacing late; a process that dies in between
// leaves them to their next poll (Config.PollInterval).
//
// The NOTIFY is never carried inside a unit of work: it would take
// PostgreSQL's notification lock from the commit's pre-commit phase to
// its end, on the commit's critical path. Measured on 2026-12-07
// (ab-bench, 4 pairs, batch 1 lanes 1): carrying it in the commit that
// was due ran at 0.95 of sending it from the notifier.

// The notification times are nanoseconds on the store's monotonic clock
// (notifyNow), so that a step of the wall clock cannot hold NOTIFYs back.

// notifyNow is the time on the store's monotonic clock.
func (s *Store) notifyNow() int64 { return int64(time.Since(s.notifyBase)) }

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
// enqueued messages (or released holds): at once
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

// notifier sends the NOTIFYs the commits asked for: at once when none was
// sent for notifySpacing, else one notifySpacing after the last, which
// covers every commit that asked meanwhile; when the store closes, it
// sends the one still owed.
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
		if wait := time.Duration(s.notifySent.Load() + int64(s.notifySpacing) - s.notifyNow()); wait > 0 {
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
			continue // one sent after the latest request covers it
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
