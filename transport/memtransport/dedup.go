package memtransport

import "time"

// dedupWindow remembers the publish IDs (transport.PublishID) accepted
// within Config.DedupWindow, oldest first, as a JetStream stream does.
// Its zero value is empty; the Transport's lock guards it.
type dedupWindow struct {
	at    map[string]time.Time // accepted publish ID -> when
	order []string             // the keys of at, oldest first
}

// accept reports whether an envelope with publish ID id, published at now,
// is new within window, and remembers it if so. A window of 0 or less
// accepts everything and remembers nothing.
func (w *dedupWindow) accept(id string, now time.Time, window time.Duration) bool {
	if window <= 0 {
		return true
	}
	w.expire(now, window)
	if _, ok := w.at[id]; ok {
		return false
	}
	if w.at == nil {
		w.at = map[string]time.Time{}
	}
	w.at[id] = now
	w.order = append(w.order, id)
	return true
}

// expire forgets the IDs accepted window or longer before now.
func (w *dedupWindow) expire(now time.Time, window time.Duration) {
	n := 0
	for n < len(w.order) && now.Sub(w.at[w.order[n]]) >= window {
		delete(w.at, w.order[n])
		n++
	}
	w.order = w.order[n:] // append reallocates without the forgotten prefix
}
