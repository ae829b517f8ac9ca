package deploycheck_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// sampleStore is a store that counts and lists its instances
// (readmodel.Censuser, readmodel.InstanceQuerier) and records each query.
type sampleStore struct {
	store.Store
	census    *readmodel.Census
	instances []*store.Instance
	queries   []readmodel.InstanceQuery
	read      map[string]int // times each key was returned
}

func (s *sampleStore) Census(context.Context) (*readmodel.Census, error) { return s.census, nil }

// QueryInstances serves the query the sample makes: one saga type,
// active or not, updated from a time on, in (UpdatedAt, Key) order after
// a cursor. It records the keys it returns.
func (s *sampleStore) QueryInstances(_ context.Context, p *readmodel.InstanceQuery) ([]*store.Instance, error) {
	s.queries = append(s.queries, *p)
	slices.SortFunc(s.instances, func(a, b *store.Instance) int {
		return cmp.Or(a.UpdatedAt.Compare(b.UpdatedAt), strings.Compare(a.SagaType, b.SagaType), strings.Compare(a.Key, b.Key))
	})
	var out []*store.Instance
	for _, in := range s.instances {
		if in.SagaType != p.SagaType || p.Status != "" && in.Status() != p.Status || p.Stuck && in.Status() != store.StatusActive || in.UpdatedAt.Before(p.UpdatedFrom) {
			continue
		}
		if a := p.After; a != nil && cmp.Or(in.UpdatedAt.Compare(a.UpdatedAt), strings.Compare(in.Key, a.Key)) <= 0 {
			continue
		}
		out = append(out, in)
	}
	out = out[:min(len(out), p.Limit)]
	for _, in := range out {
		s.read[in.Key]++
	}
	return out, nil
}

func (s *sampleStore) CountInstances(context.Context, string) ([]readmodel.StateCount, error) {
	return nil, nil
}

type sampleDoc struct {
	N int `json:"n"`
}

// sampleMachine is at schema version 2; its upgrade from 1 refuses a
// document whose n is a string.
func sampleMachine() *saga.Machine[sampleDoc] {
	m := saga.New[sampleDoc]("doc")
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
		var v struct{ N any }
		if err := json.Unmarshal(old, &v); err != nil {
			return nil, err
		}
		if _, ok := v.N.(string); ok {
			return nil, errors.New("n is a string")
		}
		return old, nil
	})
	open := m.State("Open")
	ev := saga.NewEvent[sampleDoc](m, func(sampleDoc) string { return "k" })
	m.Initially(saga.When(ev).TransitionTo(open))
	return m
}

// newSampleStore holds 700 live "doc" sagas at schema version 1, the
// oldest first, three updated at each time (so that pages of 500 end
// between sagas updated at the same time), of which k-0003 and the
// hostile key at position 550 do not upgrade; one at version 3 (too new for the machine); an older
// finished saga that does not upgrade either (never sampled: it is not
// live); and live sagas of a type whose machine has no decoder.
func newSampleStore() (*sampleStore, string) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hostile := "\x00<script>\xff"
	s := &sampleStore{read: map[string]int{}}
	add := func(typ, key, data string, version int, at time.Time) *store.Instance {
		in := &store.Instance{SagaType: typ, Key: key, State: "Open", Data: []byte(data), SchemaVersion: version, UpdatedAt: at}
		s.instances = append(s.instances, in)
		return in
	}
	add("doc", "finished", `{"n":"old"}`, 1, t0).FinishedAt = t0
	for i := range 700 {
		key, data := fmt.Sprintf("k-%04d", i), `{"n":1}`
		switch i {
		case 3:
			data = `{"n":"three"}`
		case 550:
			key, data = hostile, `{"n":"hostile"}`
		}
		add("doc", key, data, 1, t0.Add(time.Duration(i/3+1)*time.Second))
	}
	add("doc", "z-too-new", `{"n":"new"}`, 3, t0.Add(time.Hour))
	add("other", "o-1", `{}`, 1, t0)
	s.census = &readmodel.Census{States: []readmodel.LiveStateCount{
		{SagaType: "doc", State: "Open", SchemaVersion: 1, Count: 700},
		{SagaType: "doc", State: "Open", SchemaVersion: 3, Count: 1},
		{SagaType: "other", State: "Open", SchemaVersion: 1, Count: 1},
	}}
	return s, hostile
}

func sampleOptions(n int) deploycheck.Options {
	m := sampleMachine()
	other := saga.New[sampleDoc]("other")
	other.State("Open")
	return deploycheck.Options{Machines: []saga.Description{m.Describe(), other.Describe()}, Sample: n,
		Decoders: map[string]func([]byte, int) error{m.Name(): m.CheckData}}
}

// --sample N decodes up to N live state documents per saga type, the
// least recently updated first and only live ones, and reports those that
// do not decode as one state-undecodable hazard with their count and
// keys, hostile keys quoted. A document at a version the check reports
// already is not decoded again; a type without a decoder is a notice.
func TestSampleReportsUndecodableDocuments(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sample, read, failed int
		keys                 []string
	}{
		{sample: 5, read: 5, failed: 1, keys: []string{"k-0003"}},
		{sample: 600, read: 600, failed: 2, keys: []string{"k-0003", "\x00<script>\xff"}},
		{sample: 10_000, read: 701, failed: 2, keys: []string{"k-0003", "\x00<script>\xff"}},
	} {
		t.Run(fmt.Sprint(c.sample), func(t *testing.T) {
			st, _ := newSampleStore()
			r, err := deploycheck.Check(t.Context(), st, sampleOptions(c.sample))
			if err != nil {
				t.Fatal(err)
			}
			var got []deploycheck.Hazard
			for _, h := range r.Hazards {
				if h.Kind == deploycheck.StateUndecodable {
					got = append(got, h)
				}
			}
			if len(got) != 1 || got[0].SagaType != "doc" || got[0].Count != int64(c.failed) {
				t.Fatalf("--sample %d: state-undecodable hazards %+v; want one for doc with count %d", c.sample, got, c.failed)
			}
			for _, k := range c.keys {
				if !strings.Contains(got[0].Detail, fmt.Sprintf("key %q", k)) {
					t.Errorf("--sample %d: detail %q does not name key %q, quoted", c.sample, got[0].Detail, k)
				}
			}
			if strings.Contains(got[0].Detail, `"finished"`) || strings.Contains(got[0].Detail, "z-too-new") {
				t.Errorf("--sample %d: detail %q names a finished saga or one at a version reported already", c.sample, got[0].Detail)
			}
			skipped := c.read - min(c.read, 700) // z-too-new, at a version reported already
			if len(r.Samples) != 2 || r.Samples[0].SagaType != "doc" || r.Samples[0].Read != c.read || r.Samples[0].Skipped != skipped || r.Samples[0].Failed != c.failed {
				t.Errorf("--sample %d: samples %+v; want doc read %d, skipped %d, failed %d", c.sample, r.Samples, c.read, skipped, c.failed)
			}
			var oldest []string // the first c.read live docs, oldest first
			for _, in := range st.instances {
				if in.SagaType == "doc" && in.FinishedAt.IsZero() && len(oldest) < c.read {
					oldest = append(oldest, in.Key)
				}
			}
			for _, k := range oldest {
				if st.read[k] == 0 {
					t.Errorf("--sample %d: key %q, among the %d least recently updated, was not read", c.sample, k, c.read)
				}
			}
			if len(st.read) != c.read {
				t.Errorf("--sample %d: %d distinct keys read, want %d", c.sample, len(st.read), c.read)
			}
			for k, n := range st.read {
				if n != 1 {
					t.Errorf("--sample %d: key %q read %d times, want once", c.sample, k, n)
				}
			}
			for _, q := range st.queries {
				if q.SagaType != "doc" || q.Status != store.StatusActive || !q.Stuck || q.Limit < 1 || q.Limit > 500 {
					t.Errorf("--sample %d: query %+v; want saga type doc, live only, oldest first, a bounded page", c.sample, q)
				}
			}
			if !slices.ContainsFunc(r.Notices, func(h deploycheck.Hazard) bool {
				return h.Kind == deploycheck.StateUndecodable && h.SagaType == "other" && strings.Contains(h.Detail, "not sampled")
			}) {
				t.Errorf("--sample %d: notices %+v; want one saying other was not sampled", c.sample, r.Notices)
			}
			var text bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(text.String(), "\x00") || !utf8.Valid(text.Bytes()) || !strings.Contains(text.String(), fmt.Sprintf("sampled %d live state document(s) of doc: %d did not decode", c.read, c.failed)) {
				t.Errorf("--sample %d: text report\n%s\nwant the sample's line and no raw hostile bytes", c.sample, text.String())
			}
		})
	}
}

// Without --sample nothing is read or decoded; with it, a store that
// cannot list its instances is refused with ErrNoSample.
func TestSampleNeedsAnInstanceQuerier(t *testing.T) {
	t.Parallel()
	st, _ := newSampleStore()
	r, err := deploycheck.Check(t.Context(), st, sampleOptions(0))
	if err != nil || len(st.queries) != 0 || r.Samples != nil {
		t.Fatalf("no sample: %v, %d queries, samples %+v; want none", err, len(st.queries), r.Samples)
	}
	type censusOnly struct {
		store.Store
		readmodel.Censuser
	}
	_, err = deploycheck.Check(t.Context(), censusOnly{Censuser: st}, sampleOptions(5))
	if !errors.Is(err, deploycheck.ErrNoSample) {
		t.Errorf("--sample on a store that cannot list instances: %v; want ErrNoSample", err)
	}
}
