package redisstreams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/transport"
)

// Receive hands out up to max deliveries from any partition (max < 1
// means 1): delayed messages that fell due, then messages whose lease
// expired, then new ones. It blocks until there is at least one, ctx ends,
// or the transport is closed; while the server cannot be reached it waits
// for it.
func (t *Transport) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return t.receive(ctx, max, 0, 1)
}

// ReceivePartition is Receive restricted to the messages whose
// CorrelationID (or ID without one) hashes to part modulo parts, with the
// hash Publish chooses a stream by. When parts divides Config.Partitions it
// reads only the streams of its part; otherwise it reads the streams that
// can hold its keys and keeps what belongs to another part for that part's
// next call in this process.
func (t *Transport) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("redisstreams: ReceivePartition(part %d, parts %d): want 0 <= part < parts", part, parts)
	}
	return t.receive(ctx, max, part, parts)
}

// partitionsOf returns the streams ReceivePartition(part, parts) reads and
// whether their messages must be filtered by hash.
func (t *Transport) partitionsOf(part, parts int) ([]int, bool) {
	n := t.cfg.Partitions
	var ps []int
	if parts <= 1 {
		for i := range n {
			ps = append(ps, i)
		}
		return ps, false
	}
	// A key with hash h is in stream h mod n; it belongs to part h mod
	// parts. With g = gcd(n, parts), h ≡ part (mod g) and so its stream
	// is ≡ part (mod g). When parts divides n (g = parts), the stream
	// alone decides the part.
	g := gcd(n, parts)
	for i := range n {
		if i%g == part%g {
			ps = append(ps, i)
		}
	}
	return ps, g != parts
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// partitionOf is the partition of an envelope.
func (t *Transport) partitionOf(correlationID, id string) (int, uint32) {
	h := partitionHash(transport.PartitionKey(&transport.Envelope{ID: id, CorrelationID: correlationID}))
	return int(h % uint32(t.cfg.Partitions)), h
}

func (t *Transport) receive(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if max < 1 {
		max = 1
	}
	t.startJanitor()
	ps, filter := t.partitionsOf(part, parts)
	for {
		if t.isClosed() {
			return nil, transport.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out, arrived := t.takeHeld(max, part, parts)
		if len(out) >= max {
			return out, nil
		}
		// Start at another partition each time, so that a busy one does
		// not starve the others.
		rr := int(t.rr.Add(1) % uint64(len(ps)))
		order := append(append([]int(nil), ps[rr:]...), ps[:rr]...)
		var res *received
		err := t.do(ctx, "receive", 0, func(ctx context.Context) error {
			var err error
			res, err = t.claim(ctx, order, max-len(out))
			return err
		})
		if err != nil {
			if len(out) > 0 {
				t.putBack(out)
			}
			if ctx.Err() != nil && !t.isClosed() {
				return nil, ctx.Err()
			}
			return nil, err
		}
		for _, d := range res.ds {
			_, h := t.partitionOf(d.Envelope.CorrelationID, d.Envelope.ID)
			if filter && int(h%uint32(parts)) != part {
				t.hold(d, h)
				continue
			}
			out = append(out, d)
		}
		if len(out) > 0 {
			return out, nil
		}
		if len(res.ds) > 0 {
			continue // all of it was for other parts: read again
		}
		t.wait(ctx, order, res, arrived)
	}
}

// received is what one run of the receive script returned.
type received struct {
	ds      []transport.Delivery
	now     int64  // the server's time, ms
	nextDue string // the earliest due delayed entry, ms, or ""
	waitIDs []string
}

// claim runs the receive script on the partitions ps (in that order) for
// at most budget entries.
func (t *Transport) claim(ctx context.Context, ps []int, budget int) (*received, error) {
	keys := make([]string, 0, 2*len(ps)+1)
	args := make([]any, 0, 4+2*len(ps))
	args = append(args, group, t.consumer, budget, t.cfg.Lease.Milliseconds())
	now := time.Now()
	every := t.reclaimEvery()
	t.mu.Lock()
	for _, p := range ps {
		keys = append(keys, t.streams[p], t.delays[p])
		flag := "0"
		if now.Sub(t.reclaimed[p]) >= every {
			flag = "1"
			t.reclaimed[p] = now
		}
		args = append(args, flag, t.cursors[p])
	}
	t.mu.Unlock()
	keys = append(keys, t.wake)
	raw, err := receiveScript.Run(ctx, t.rdb, keys, args...).Slice()
	if err != nil {
		if !noGroup(err) {
			// Look for expired leases again at once on the next try.
			t.mu.Lock()
			for _, p := range ps {
				t.reclaimed[p] = time.Time{}
			}
			t.mu.Unlock()
		}
		return nil, err
	}
	if len(raw) != 5 {
		return nil, fmt.Errorf("receive script returned %d values, want 5", len(raw))
	}
	items, _ := raw[0].([]any)
	cursors, _ := raw[1].([]any)
	res := &received{now: toInt(raw[2]), nextDue: toString(raw[3])}
	for _, v := range asSlice(raw[4]) {
		res.waitIDs = append(res.waitIDs, toString(v))
	}
	t.mu.Lock()
	for i, c := range cursors {
		if s := toString(c); s != "" && i < len(ps) {
			t.cursors[ps[i]] = s
		}
	}
	t.mu.Unlock()
	for _, it := range items {
		f := asSlice(it)
		if len(f) != 4 {
			return nil, fmt.Errorf("receive script returned an item of %d values, want 4", len(f))
		}
		pos := int(toInt(f[0]))
		if pos < 0 || pos >= len(ps) {
			return nil, fmt.Errorf("receive script returned partition position %d of %d", pos, len(ps))
		}
		res.ds = append(res.ds, t.delivery(ps[pos], toString(f[1]), asSlice(f[2]), int(toInt(f[3]))))
	}
	return res, nil
}

// reclaimEvery is how often a partition is searched for expired leases.
func (t *Transport) reclaimEvery() time.Duration {
	return min(max(t.cfg.Lease/8, 10*time.Millisecond), t.cfg.PollInterval)
}

// wait blocks until a partition of ps or the wake stream gets an entry, a
// delayed entry falls due, it is time to look for expired leases, another
// Receive of this process read something for this one, ctx ends, or the
// transport closes. The blocking XREAD only wakes the caller: it claims
// nothing, so a Receive that gives up while it runs loses no message.
func (t *Transport) wait(ctx context.Context, ps []int, res *received, arrived <-chan struct{}) {
	d := min(t.cfg.PollInterval, t.reclaimEvery())
	if res.nextDue != "" {
		if due, err := strconv.ParseFloat(res.nextDue, 64); err == nil {
			d = min(d, time.Duration(int64(due)-res.now)*time.Millisecond)
		}
	}
	if d < time.Millisecond {
		return
	}
	if len(res.waitIDs) != len(ps)+1 {
		return
	}
	streams := make([]string, 0, 2*len(ps)+2)
	for _, p := range ps {
		streams = append(streams, t.streams[p])
	}
	streams = append(streams, t.wake)
	streams = append(streams, res.waitIDs...)

	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.wg.Add(1)
	t.mu.Unlock()
	woke := make(chan struct{})
	go func() {
		defer t.wg.Done()
		defer close(woke)
		_ = t.rdb.XRead(t.life, &redis.XReadArgs{Streams: streams, Count: 1, Block: d}).Err()
	}()
	select {
	case <-woke:
	case <-arrived:
	case <-ctx.Done():
	case <-t.done:
	}
}

// delivery decodes one entry of partition p. An entry that is not an
// envelope this package wrote (no meta field, or one that does not decode
// to an id and a type) is handed out with what it has: its id field, or
// "redis:<stream>:<entry id>" without one, no type, and the entry's fields
// as a JSON object for a body, so that the engine dead-letters it with a
// reason and acknowledges it instead of it coming back forever.
func (t *Transport) delivery(p int, entryID string, fields []any, count int) transport.Delivery {
	vals := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		vals[toString(fields[i])] = toString(fields[i+1])
	}
	token := strconv.Itoa(p) + "/" + entryID + "/" + strconv.Itoa(count) + "/" + t.consumer
	env, err := decode(vals)
	if err != nil {
		id := vals["id"]
		if id == "" {
			id = "redis:" + t.streams[p] + ":" + entryID
		}
		body, _ := json.Marshal(vals)
		t.log.Warn("redisstreams: an entry is not an Idem envelope; handing it out without a type, for the engine to dead-letter", "stream", t.streams[p], "entry", entryID, "message_id", id, "error", err)
		env = transport.Envelope{ID: id, Body: body}
	}
	return transport.Delivery{Envelope: env, Attempt: count, Token: token}
}

// meta is the envelope without its body, as the entry's meta field holds
// it (JSON).
type meta struct {
	ID             string            `json:"id"`
	Type           string            `json:"type"`
	CorrelationID  string            `json:"correlation_id,omitempty"`
	CausationID    string            `json:"causation_id,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	SentAt         time.Time         `json:"sent_at"`
}

func decode(vals map[string]string) (transport.Envelope, error) {
	raw, ok := vals["meta"]
	if !ok {
		return transport.Envelope{}, errors.New("no meta field")
	}
	var m meta
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return transport.Envelope{}, fmt.Errorf("meta field is not JSON envelope metadata: %w", err)
	}
	if m.ID == "" || m.Type == "" {
		return transport.Envelope{}, errors.New("meta field has no id or type")
	}
	var body []byte
	if b := vals["body"]; b != "" {
		body = []byte(b)
	}
	return transport.Envelope{ID: m.ID, Type: m.Type, CorrelationID: m.CorrelationID, CausationID: m.CausationID,
		IdempotencyKey: m.IdempotencyKey, Headers: m.Headers, SentAt: m.SentAt, Body: body}, nil
}

// hold keeps a delivery read for another part of ReceivePartition.
func (t *Transport) hold(d transport.Delivery, h uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, held{d: d, hash: h, at: time.Now()})
	close(t.arrived)
	t.arrived = make(chan struct{})
}

// putBack returns deliveries taken from the held ones to them.
func (t *Transport) putBack(ds []transport.Delivery) {
	for _, d := range ds {
		_, h := t.partitionOf(d.Envelope.CorrelationID, d.Envelope.ID)
		t.hold(d, h)
	}
}

// takeHeld takes up to max held deliveries of part and returns them with
// the channel closed when more are held. Those held longer than the lease
// are dropped: another consumer may have reclaimed them, and if not, one
// will.
func (t *Transport) takeHeld(max, part, parts int) ([]transport.Delivery, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []transport.Delivery
	if len(t.buf) > 0 {
		now := time.Now()
		kept := t.buf[:0]
		for _, h := range t.buf {
			switch {
			case now.Sub(h.at) >= t.cfg.Lease:
			case len(out) < max && (parts <= 1 || int(h.hash%uint32(parts)) == part):
				out = append(out, h.d)
			default:
				kept = append(kept, h)
			}
		}
		clear(t.buf[len(kept):])
		t.buf = kept
	}
	return out, t.arrived
}

// token is a parsed Delivery.Token: "<partition>/<entry id>/<delivery
// count>/<consumer>".
type token struct {
	part     int
	entry    string
	count    string
	consumer string
}

func (t *Transport) parseToken(d transport.Delivery) (token, error) {
	f := strings.SplitN(d.Token, "/", 4)
	if len(f) == 4 {
		p, err := strconv.Atoi(f[0])
		if err == nil && p >= 0 && p < t.cfg.Partitions && f[1] != "" && f[2] != "" && f[3] != "" {
			return token{part: p, entry: f[1], count: f[2], consumer: f[3]}, nil
		}
	}
	return token{}, fmt.Errorf("redisstreams: delivery of %s: token %q was not made by this package (or by a transport with fewer partitions)", d.Envelope.ID, d.Token)
}

// settle runs the settle script for ds: an ack for delay < 0, a nack with
// that delay otherwise. It returns one result per delivery.
func (t *Transport) settle(ctx context.Context, ds []transport.Delivery, delay time.Duration) ([]string, error) {
	toks := make([]token, len(ds))
	for i, d := range ds {
		tk, err := t.parseToken(d)
		if err != nil {
			return nil, err
		}
		toks[i] = tk
	}
	ms := int64(-1)
	if delay >= 0 {
		ms = delay.Milliseconds()
		if delay%time.Millisecond != 0 {
			ms++ // never early
		}
	}
	keys := make([]string, 0, 2*len(ds)+1)
	args := make([]any, 0, 2+3*len(ds))
	args = append(args, group, ms)
	for _, tk := range toks {
		keys = append(keys, t.streams[tk.part], t.delays[tk.part])
		args = append(args, tk.entry, tk.consumer, tk.count)
	}
	keys = append(keys, t.wake)
	res, err := settleScript.Run(ctx, t.rdb, keys, args...).StringSlice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(ds) {
		return nil, fmt.Errorf("settle script returned %d results for %d deliveries", len(res), len(ds))
	}
	return res, nil
}

// settleErrors turns the settle script's results into errors.
func (t *Transport) settleErrors(op string, ds []transport.Delivery, res []string) error {
	var errs []error
	for i, r := range res {
		if owner, ok := strings.CutPrefix(r, "lost "); ok {
			holder, count, _ := strings.Cut(owner, " ")
			errs = append(errs, fmt.Errorf("redisstreams: %s of %s (token %s): %w: the lease expired and the entry was handed out again (delivery %s, to consumer %s), which is left untouched",
				op, ds[i].Envelope.ID, ds[i].Token, transport.ErrLeaseLost, count, holder))
		}
	}
	return errors.Join(errs...)
}

// maxSettle bounds the deliveries settled by one script run.
const maxSettle = 256

// Ack acknowledges deliveries: each is removed from its stream (XACK and
// XDEL in one script) if it is still the delivery the server records for
// its entry (same consumer, same delivery count). A delivery whose lease
// expired and whose entry was handed out again returns an error wrapping
// transport.ErrLeaseLost and leaves the newer delivery untouched; the
// others are settled. Acknowledging a settled delivery does nothing.
// While the server cannot be reached Ack waits for it, for up to
// Config.Lease (after which the entry may be handed out again anyway).
func (t *Transport) Ack(ctx context.Context, ds []transport.Delivery) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	return t.fencedRun(ctx, "ack", ds, func(ctx context.Context, chunk []transport.Delivery) ([]string, error) {
		return t.settle(ctx, chunk, -1)
	})
}

// fencedRun runs script, a fenced script of one result per delivery (see
// settleErrors), on ds in chunks of maxSettle, waiting for the server for
// up to Config.Lease at each, and joins the errors of the deliveries
// whose leases were lost. Ack and ExtendLeases share it.
func (t *Transport) fencedRun(ctx context.Context, op string, ds []transport.Delivery, script func(context.Context, []transport.Delivery) ([]string, error)) error {
	var errs []error
	for start := 0; start < len(ds); start += maxSettle {
		chunk := ds[start:min(start+maxSettle, len(ds))]
		var res []string
		err := t.do(ctx, op, t.cfg.Lease, func(ctx context.Context) error {
			var err error
			res, err = script(ctx, chunk)
			return err
		})
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		errs = append(errs, t.settleErrors(op, chunk, res))
	}
	return errors.Join(errs...)
}

// Nack returns a delivery for redelivery no sooner than delay from now,
// by the server's clock: in one script, the entry's pending record is
// removed (XACK, the entry stays in its stream) and its id goes into its
// partition's delay set, from which a Receive claims it back once due,
// with the next delivery count. Delays therefore never block the messages
// behind them. Fencing and waiting for the server are as for Ack.
func (t *Transport) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	delay = max(delay, 0)
	var res []string
	err := t.do(ctx, "nack", t.cfg.Lease, func(ctx context.Context) error {
		var err error
		res, err = t.settle(ctx, []transport.Delivery{d}, delay)
		return err
	})
	if err != nil {
		return err
	}
	return t.settleErrors("nack", []transport.Delivery{d}, res)
}

// startJanitor starts, with the first Receive, the loop that deletes
// consumers of crashed or stopped processes once they hold nothing.
func (t *Transport) startJanitor() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.consuming || t.closed {
		return
	}
	t.consuming = true
	t.wg.Add(1)
	go t.janitor()
}

// janitor deletes, every 10 minutes, the group's consumers that hold no
// pending entry and were idle for an hour (or 10 leases, if longer).
// Each process's consumer name is new, so without this the group's
// consumer list would grow with every restart.
func (t *Transport) janitor() {
	defer t.wg.Done()
	idle := max(time.Hour, 10*t.cfg.Lease)
	tick := time.NewTicker(10 * time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(t.life, 30*time.Second)
		n, err := forgetScript.Run(ctx, t.rdb, t.streams, group, t.consumer, idle.Milliseconds(), "others").Int()
		cancel()
		if err != nil {
			t.log.Debug("redisstreams: deleting idle consumers failed", "error", err)
		} else if n > 0 {
			t.log.Info("redisstreams: deleted idle consumers that held nothing", "consumers", n)
		}
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
