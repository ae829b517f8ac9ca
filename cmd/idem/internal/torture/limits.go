package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The limits mode (Options.Limits, idem torture --limits): the workers'
// engines declare flow-control limits, the driver's messages carry one of
// two tenants in a header (one of them floods), and each worker writes a
// flow log of what it was admitted and how it settled it, which
// checkFlow checks after the run (see flowcheck.go for what it asserts
// and why it is sound).

// fairnessHeader carries a message's tenant: the header the engine's fair
// share orders by (docs/flow-control.md).
const fairnessHeader = transport.HeaderFairnessKey

// The two tenants of the workload: flood sends three quarters of it.
const (
	tenantFlood = "flood"
	tenantQuiet = "quiet"
)

// The limits the workers declare.
const (
	// limitResource caps a resource that two handlers' message types
	// share: at most 2 in flight across the workers.
	limitResource = "parser-api"
	// limitRate admits the uploads' storage notifications at 20 a second
	// with a burst of 5.
	limitRate = "upload-intake"
	// limitTenant caps each tenant's increments: 8 in flight per tenant.
	limitTenant = "tenant-incs"
)

// runLimits are the limits of a limits run, with the message types each
// applies to; limitTenant is keyed by the tenant header.
func runLimits() []idem.Limit {
	return []idem.Limit{
		{Name: limitResource, MessageTypes: []string{parseType, addedType}, Concurrency: 2},
		{Name: limitRate, MessageTypes: []string{savedType}, Rate: 20, Burst: 5},
		{Name: limitTenant, MessageTypes: []string{incType}, Concurrency: 8, Key: tenantOf},
	}
}

// runLimitValues are runLimits' values by name, as the checker needs them.
func runLimitValues() map[string]store.Limit {
	out := map[string]store.Limit{}
	for _, l := range runLimits() {
		out[l.Name] = store.Limit{Name: l.Name, Concurrency: l.Concurrency, Rate: l.Rate, Burst: l.Burst}
	}
	return out
}

// tenantOf is a message's tenant: its fairness header.
func tenantOf(env *idem.Envelope) string { return env.Headers[fairnessHeader] }

// setTenant puts the tenant in env's header.
func setTenant(env *idem.Envelope, tenant string) {
	if env.Headers == nil {
		env.Headers = map[string]string{}
	}
	env.Headers[fairnessHeader] = tenant
}

// tagTenant puts in the header of env, a message the driver sends, the
// tenant of its saga: the quiet tenant has the first counter of each
// wave and every fourth search, the flood tenant the rest.
func tagTenant(env *idem.Envelope, r *Record) {
	tenant := tenantFlood
	switch r.Kind {
	case kindInc:
		if strings.HasSuffix(r.Key, "-0") {
			tenant = tenantQuiet
		}
	case kindStarted, kindSaved, kindRenotified:
		var i int
		if _, err := fmt.Sscanf(r.Key, "search-%d", &i); err == nil && i%4 == 0 {
			tenant = tenantQuiet
		}
	default:
		return
	}
	setTenant(env, tenant)
}

// flowLogName is the flow log of the worker of generation gen in dir.
func flowLogName(gen int) string { return fmt.Sprintf("flow-%06d.jsonl", gen) }

// flowEvent is one line of a worker's flow log. Times are Unix
// nanoseconds of the worker's wall clock.
type flowEvent struct {
	// Ev is the event. On the store's own queue: recv-begin (a receive
	// is called), recv-end (it returned; D lists the deliveries that need
	// a counter), settle (a commit, Ack or Nack of Tokens is about to be
	// sent: How) or settled (it returned; OK says whether it succeeded).
	// Beside a broker (holds.go), keyed by holder: admit-begin (an Admit
	// is called), admit-end (it returned; D lists the requests admitted
	// that took a counter, TTL their holds' TTL), release (a commit or a
	// ReleaseHolds call (How) releasing Holders is about to be sent),
	// released (it returned: OK) and extend (an ExtendHolds of Holders to
	// TTL is about to be sent).
	Ev string `json:"ev"`
	// R numbers the process's receives, Admits and releases (one
	// sequence).
	R int64 `json:"r,omitempty"`
	// T is when the event happened (settled carries none).
	T int64 `json:"t,omitempty"`
	// OK is a receive's, an Admit's, a settle's or a release's success.
	OK      bool         `json:"ok,omitempty"`
	D       []flowDelive `json:"d,omitempty"`
	Tokens  []string     `json:"tok,omitempty"`
	Holders []string     `json:"h,omitempty"`
	How     string       `json:"how,omitempty"`
	// TTL is, in nanoseconds, the TTL of an Admit's holds or of an
	// extension.
	TTL int64 `json:"ttl,omitempty"`
}

// flowDelive is one admitted delivery of a recv-end event (Token, ID and
// Tenant set), or one admitted request of an admit-end event (Holder
// set).
type flowDelive struct {
	Token  string           `json:"tok,omitempty"`
	Holder string           `json:"h,omitempty"`
	ID     string           `json:"id,omitempty"`
	Tenant string           `json:"tenant,omitempty"`
	Keys   []store.LimitKey `json:"keys"`
}

// flowLog is a worker's flow log: one JSON line per event, each written
// with one write(2) to a file opened for appending and never buffered in
// the process, so that a SIGKILL loses no event written before it.
type flowLog struct {
	mu   sync.Mutex
	f    *os.File
	r    int64
	held map[string]bool // tokens of admitted deliveries that needed a counter
}

// openFlowLog creates the flow log at path.
func openFlowLog(path string) (*flowLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the flow log: %w", err)
	}
	return &flowLog{f: f, held: map[string]bool{}}, nil
}

// write appends ev; the caller holds l.mu. An error is dropped: a lost
// event makes the checker see less, never more (see flowcheck.go).
func (l *flowLog) write(ev *flowEvent) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	_, _ = l.f.Write(append(b, '\n'))
}

// begin notes that a receive is called, and returns its number.
func (l *flowLog) begin() int64 { return l.open("recv-begin", nil, "") }

// open notes the start of a call (ev), with the holders it names and
// how, and returns its number. The time is read under l.mu, so that the
// events of one log are in the order of their times.
func (l *flowLog) open(ev string, holders []string, how string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.r++
	l.write(&flowEvent{Ev: ev, R: l.r, T: time.Now().UnixNano(), Holders: holders, How: how})
	return l.r
}

// runNeeds are the counters a message needs under runLimits, computed
// here rather than taken from the engine, so that a delivery the engine
// let through without admitting it is logged and checked all the same.
func runNeeds(env *transport.Envelope) []store.LimitKey {
	var out []store.LimitKey
	for _, l := range runLimits() {
		if !slices.Contains(l.MessageTypes, env.Type) {
			continue
		}
		k := store.LimitKey{Name: l.Name}
		if l.Key != nil {
			k.Key = l.Key(env)
		}
		out = append(out, k)
	}
	return out
}

// end notes that receive r returned ds (err: it failed), with the
// counters each delivery needs.
func (l *flowLog) end(r int64, ds []transport.Delivery, err error) {
	t := time.Now().UnixNano()
	ev := &flowEvent{Ev: "recv-end", R: r, T: t, OK: err == nil}
	for _, d := range ds {
		if ks := runNeeds(&d.Envelope); len(ks) > 0 {
			ev.D = append(ev.D, flowDelive{Token: d.Token, ID: d.Envelope.ID, Tenant: tenantOf(&d.Envelope), Keys: ks})
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range ev.D {
		l.held[d.Token] = true
	}
	l.write(ev)
}

// heldOf returns the tokens of ds that this process was admitted with a
// counter.
func (l *flowLog) heldOf(ds []transport.Delivery) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, d := range ds {
		if l.held[d.Token] {
			out = append(out, d.Token)
		}
	}
	return out
}

// settle notes that a settlement (how) of tokens is about to be sent.
func (l *flowLog) settle(tokens []string, how string) {
	if len(tokens) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(&flowEvent{Ev: "settle", T: time.Now().UnixNano(), Tokens: tokens, How: how})
}

// settled notes a settlement's outcome.
func (l *flowLog) settled(tokens []string, how string, err error) {
	if len(tokens) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(&flowEvent{Ev: "settled", Tokens: tokens, How: how, OK: err == nil})
}

// The admitting queue of a faultQueue (both SQL stores are admitting
// queues): the engine admits through it when the run declares limits.

func (w *faultQueue) admitting() store.AdmittingQueue { return w.q.(store.AdmittingQueue) }

// ReceiveAdmitted receives through the wrapped store's admission and, in
// a limits run, writes the receive's bounds and the counters each
// delivery needs to the flow log. With BreakNoAdmission it asks for no
// counter: every message is admitted at once.
func (w *faultQueue) ReceiveAdmitted(ctx context.Context, p *store.ReceiveParams) ([]transport.Delivery, error) {
	l := w.f.flow
	if l == nil {
		return w.admitting().ReceiveAdmitted(ctx, p)
	}
	if p != nil && w.f.cfg.Break == BreakNoAdmission {
		wp := *p
		wp.Needs = nil
		p = &wp
	}
	r := l.begin()
	ds, err := w.admitting().ReceiveAdmitted(ctx, p)
	l.end(r, ds, err)
	return ds, err
}

// logReceive is receive with a flow log: a plain receive in a limits run
// admits nothing, and whatever of a limited type it hands out is logged
// and checked as if admitted.
func logReceive(l *flowLog, recv func() ([]transport.Delivery, error)) ([]transport.Delivery, error) {
	if l == nil {
		return recv()
	}
	r := l.begin()
	ds, err := recv()
	l.end(r, ds, err)
	return ds, err
}

var _ store.AdmittingQueue = (*faultQueue)(nil)
