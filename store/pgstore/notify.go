package pgstore

import (
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
//   - a commit that enqueues carries the NOTIFY in its pipeline when none
//     was sent for notifySpacing (notifyDue): no round trip, no commit of
//     its own, and at most one commit per notifySpacing per process takes
//     the lock;
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

// notifyDue reports whether a commit that enqueues should carry the
// NOTIFY.
func (s *Store) notifyDue() bool {
	return time.Since(time.Unix(0, s.notifySent.Load())) >= s.notifySpacing
}

// notifiedAt records a NOTIFY sent at sent and committed.
func (s *Store) notifiedAt(sent time.Time) {
	ns := sent.UnixNano()
	for {
		cur := s.notifySent.Load()
		if cur >= ns || s.notifySent.CompareAndSwap(cur, ns) {
			return
		}
	}
}

// notifySoon wakes the receivers of this schema's queue after a commit that
// enqueued messages without carrying a NOTIFY: at once in this process, and
// through the notifier in others.
func (s *Store) notifySoon() {
	now := time.Now().UnixNano()
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

// notifier sends the NOTIFYs the commits asked for, one notifySpacing
// after the last one sent, unless a unit of work sent after the latest
// request carried one meanwhile.
func (s *Store) notifier() {
	defer s.lwg.Done()
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-s.bg.Done():
			return
		case <-s.notify:
		}
		if wait := s.notifySpacing - time.Since(time.Unix(0, s.notifySent.Load())); wait > 0 {
			t.Reset(wait)
			select {
			case <-s.bg.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if s.notifySent.Load() > s.notifyWanted.Load() {
			continue // a later unit of work carried one
		}
		sent := time.Now()
		if _, err := s.pool.Exec(s.bg, notifySQL, s.cfg.Schema); err != nil {
			if s.bg.Err() == nil {
				s.log.Warn("queue notification failed; other processes find the messages at their next poll", "error", err)
			}
			continue
		}
		s.notifiedAt(sent)
	}
}
