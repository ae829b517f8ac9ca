package bench

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/ids"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/transport"
)

// SagaType is the saga type of the counter saga.
const SagaType = "bench"

// stateOpen is the counter saga's only state.
const stateOpen = "Open"

// Counter is the counter saga's state document.
type Counter struct {
	N int `json:"n"`
}

// Increment adds one to the counter of Key.
type Increment struct {
	Key string `json:"key"`
}

// Incremented is emitted by every transition: the outbox row of the
// workload.
type Incremented struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

var (
	incrementType   = saga.MessageType(Increment{})
	incrementedType = saga.MessageType(Incremented{})
)

// Machine returns the counter saga: every Increment adds one to the
// counter of its key and emits one Incremented.
func Machine() *saga.Machine[Counter] {
	m := saga.New[Counter](SagaType)
	open := m.State(stateOpen)
	inc := saga.NewEvent[Increment](m, func(e Increment) string { return e.Key })
	step := func(c *saga.Context[Counter], e Increment) error {
		c.Data.N++
		c.Publish(Incremented{Key: e.Key, N: c.Data.N})
		return nil
	}
	m.Initially(saga.When(inc).Then(step).TransitionTo(open))
	m.During(open, saga.When(inc).Then(step))
	return m
}

// Delivery is one message of the stream. A duplicate carries the ID and key
// of an earlier delivery.
type Delivery struct {
	ID  string
	Key int
	Dup bool
}

// Workload is the stream of deliveries every contestant processes, in
// publication order, and the counters exactly-once processing must leave.
type Workload struct {
	Keys       int
	Deliveries []Delivery
	Distinct   int
	// Expected is the final counter of each key (by key index), less the
	// preloaded count (base).
	Expected []int
	// preInbox is the number of inbox records preloaded over the keys
	// (Scale.InboxRows), which set their starting counters.
	preInbox int
}

// recentWindow is how far back a "producer retry" duplicate reaches.
const recentWindow = 100

// NewWorkload returns n deliveries over keys keys, of which round(n·dup)
// are duplicates of an earlier message: half of them repeat one of the 100
// most recent distinct messages (a producer's retry), half any earlier one
// (a redelivery after a lost acknowledgement). Keys are uniform. IDs start
// with prefix; the same arguments give the same stream.
func NewWorkload(n, keys int, dup float64, seed uint64, prefix string) *Workload {
	rng := rand.New(rand.NewPCG(seed, 0xbe4c))
	w := &Workload{Keys: keys, Deliveries: make([]Delivery, 0, n), Expected: make([]int, keys)}
	dups := 0
	if n > 1 {
		dups = min(int(math.Round(float64(n)*dup)), n-1)
	}
	isDup := make([]bool, n)
	for _, p := range rng.Perm(n - 1)[:dups] {
		isDup[p+1] = true // the first delivery is never a duplicate
	}
	var distinct []Delivery
	for i := range n {
		if isDup[i] {
			var j int
			if rng.IntN(2) == 0 {
				j = len(distinct) - 1 - rng.IntN(min(recentWindow, len(distinct)))
			} else {
				j = rng.IntN(len(distinct))
			}
			d := distinct[j]
			d.Dup = true
			w.Deliveries = append(w.Deliveries, d)
			continue
		}
		d := Delivery{ID: prefix + strconv.Itoa(len(distinct)), Key: rng.IntN(keys)}
		distinct = append(distinct, d)
		w.Expected[d.Key]++
		w.Deliveries = append(w.Deliveries, d)
	}
	w.Distinct = len(distinct)
	return w
}

// Duplicates is the number of deliveries that repeat an earlier message.
func (w *Workload) Duplicates() int { return len(w.Deliveries) - w.Distinct }

func keyName(k int) string { return "k-" + strconv.Itoa(k) }

// headerSeq carries a delivery's position in the stream, so the benchmark
// can tell the copies of one message apart. The engine ignores it.
const headerSeq = "idem-bench-seq"

// Envelopes returns the deliveries as envelopes for the engine, in order.
func (w *Workload) Envelopes(sentAt time.Time) []idem.Envelope {
	envs := make([]idem.Envelope, len(w.Deliveries))
	for i, d := range w.Deliveries {
		body, _ := json.Marshal(Increment{Key: keyName(d.Key)})
		envs[i] = idem.Envelope{
			ID: d.ID, Type: incrementType, CorrelationID: keyName(d.Key), SentAt: sentAt, Body: body,
			Headers: map[string]string{headerSeq: strconv.Itoa(i)},
		}
	}
	return envs
}

// emission is the message the counter saga emits for message msgID on key
// at count n, shaped as the engine shapes it; the baselines write it to the
// outbox.
func emission(msgID, key string, n int, now time.Time) (id, meta string, body []byte) {
	body, _ = json.Marshal(Incremented{Key: key, N: n})
	env := transport.Envelope{
		ID:          ids.Derive("emit", msgID, SagaType, key, "0", ""),
		Type:        incrementedType,
		CausationID: msgID,
		SentAt:      now,
		Headers: map[string]string{
			transport.HeaderIntent:   "publish",
			transport.HeaderSagaType: SagaType,
			transport.HeaderSagaKey:  key,
		},
	}
	m, _ := json.Marshal(env)
	return env.ID, string(m), body
}
