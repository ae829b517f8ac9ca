package deploycheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// DataChecker is implemented by machines that decode a stored state
// document with their upgrade functions without naming the document's Go
// type: saga.Machine's CheckData. Options.Decoders holds their CheckData
// methods by saga type. A machine that wraps another and lacks it is not
// sampled (the report has a notice that says so).
type DataChecker interface {
	CheckData(data []byte, schemaVersion int) error
}

var _ DataChecker = (*saga.Machine[struct{}])(nil)

// ErrNoSample is returned by Check when Options.Sample is set and the
// store cannot list its live sagas (it is no readmodel.InstanceQuerier).
var ErrNoSample = errors.New("deploycheck: the store cannot list its live sagas to sample them (it is no readmodel.InstanceQuerier)")

// Sample is what Check found decoding a sample of one saga type's live
// state documents (Options.Sample).
type Sample struct {
	SagaType string `json:"saga_type"`
	// Read is how many live state documents were read: at most
	// Options.Sample, the least recently updated first (those written by
	// the oldest builds).
	Read int `json:"read"`
	// Skipped are the documents read but not decoded, because their
	// schema version is one the check reports already (schema-too-new,
	// schema-no-upgrade).
	Skipped int `json:"skipped"`
	// Failed is how many of the others did not decode with the new
	// build's upgrade functions, and Failures the first few of them.
	Failed   int             `json:"failed"`
	Failures []SampleFailure `json:"failures"`
	// NotSampled, when set, says why no document of the type was read.
	NotSampled string `json:"not_sampled,omitempty"`
}

// SampleFailure is one live state document that did not decode.
type SampleFailure struct {
	Key           string `json:"key"`
	State         string `json:"state"`
	SchemaVersion int    `json:"schema_version"`
	Error         string `json:"error"`
}

const (
	// samplePage bounds the instances one query of the sample reads.
	samplePage = 500
	// maxSampleFailures bounds the failures a Sample keeps.
	maxSampleFailures = 3
	// maxSampleError bounds the bytes of an error a failure keeps.
	maxSampleError = 300
)

// sample reads up to o.Sample live state documents of each saga type
// that the census holds and the new build registers, and decodes each
// with o.Decoders, in saga type order.
func sample(ctx context.Context, st store.Store, o Options, c *readmodel.Census) ([]Sample, error) {
	if o.Sample <= 0 {
		return nil, nil
	}
	iq, ok := st.(readmodel.InstanceQuerier)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoSample, st)
	}
	machines := map[string]*machine{}
	for _, d := range o.Machines {
		machines[d.Name] = index(d)
	}
	live := map[string]bool{}
	for _, s := range c.States {
		if machines[s.SagaType] != nil {
			live[s.SagaType] = true
		}
	}
	var out []Sample
	for _, typ := range slices.Sorted(maps.Keys(live)) {
		s := Sample{SagaType: typ, Failures: []SampleFailure{}}
		if dec := o.Decoders[typ]; dec == nil {
			s.NotSampled = "the new build's machine has no CheckData (deploycheck.DataChecker): a Machine that wraps another?"
		} else if err := s.read(ctx, iq, o.Sample, machines[typ], dec); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// read pages through up to n live instances of s's type, the least
// recently updated first, and decodes each.
func (s *Sample) read(ctx context.Context, iq readmodel.InstanceQuerier, n int, m *machine, dec func([]byte, int) error) error {
	q := &readmodel.InstanceQuery{SagaType: s.SagaType, Status: store.StatusActive, Stuck: true}
	for s.Read < n {
		q.Limit = min(samplePage, n-s.Read)
		page, err := iq.QueryInstances(ctx, q)
		if err != nil {
			return fmt.Errorf("deploycheck: sample the live sagas of %q: %w", s.SagaType, err)
		}
		for _, in := range page {
			s.decode(in, m, dec)
		}
		if len(page) < q.Limit {
			return nil
		}
		last := page[len(page)-1]
		// UpdatedFrom repeats what the cursor implies, so that a store
		// starts the next page's index range there instead of scanning
		// the pages before it again.
		q.After, q.UpdatedFrom = readmodel.CursorOf(last), last.UpdatedAt
	}
	return nil
}

// decode decodes one live instance's state document, unless its schema
// version is reported already.
func (s *Sample) decode(in *store.Instance, m *machine, dec func([]byte, int) error) {
	s.Read++
	if v := max(in.SchemaVersion, 1); v > m.d.SchemaVersion || !m.upgradable(v) {
		s.Skipped++
		return
	}
	err := dec(in.Data, in.SchemaVersion)
	if err == nil {
		return
	}
	s.Failed++
	if len(s.Failures) < maxSampleFailures {
		s.Failures = append(s.Failures, SampleFailure{Key: in.Key, State: in.State, SchemaVersion: in.SchemaVersion, Error: truncate(err.Error(), maxSampleError)})
	}
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// samples turns the sample's failures into hazards, and the types it
// could not sample into notices.
func (c *comparison) samples() {
	for _, s := range c.in.Samples {
		switch {
		case s.NotSampled != "":
			c.r.Notices = append(c.r.Notices, Hazard{Kind: StateUndecodable, SagaType: s.SagaType,
				Detail: "not sampled: " + s.NotSampled, Fix: "register the saga.Machine itself to sample its live state documents"})
		case s.Failed > 0:
			c.hazard(Hazard{Kind: StateUndecodable, SagaType: s.SagaType, Count: int64(s.Failed), Detail: s.detail(),
				Fix: fmt.Sprintf("fix the upgrade functions (saga.Machine.Upgrade) or the state type so that these documents decode; idem sagas show %s KEY prints one", quoteWord(s.SagaType))})
		}
	}
	c.r.Samples = c.in.Samples
}

// detail says how many sampled documents failed, with the first few keys
// (quoted: a key may be hostile) and the first error.
func (s *Sample) detail() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d sampled live state document(s) do not decode with the new build's upgrade functions: ", s.Failed, s.Read-s.Skipped)
	for i, f := range s.Failures {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "key %q (state %q, schema version %d)", f.Key, f.State, f.SchemaVersion)
	}
	if more := s.Failed - len(s.Failures); more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	if len(s.Failures) > 0 {
		fmt.Fprintf(&b, "; the first: %s", s.Failures[0].Error)
	}
	return b.String()
}

// quoteWord is s as one shell word in a Fix: as it is when it is plain,
// Go-quoted otherwise.
func quoteWord(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/:", r))
	}) {
		return s
	}
	return fmt.Sprintf("%q", s)
}
