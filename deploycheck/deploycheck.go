// Package deploycheck answers, before a rollout, whether a new build's
// saga machines can serve what a store holds: the live sagas and the
// states they are in, their pending timers, the messages still queued or
// in the outbox, the attributes the console filters on, and the replicas
// of other definitions still running.
//
// Check reads the store (readmodel.Censuser, and where the store keeps
// them the definition registry and the replica heartbeats) and Compare
// does the comparison, purely. Each Hazard says what would go wrong, how
// many sagas, timers or messages stand behind it, and what to change.
// `idem deploy check` prints a Report and exits non-zero on a hazard;
// idem.Config.DeployCheck runs the same check when an engine starts.
package deploycheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// Options are what Check compares the store with.
type Options struct {
	// Machines describe the new build's machines (saga.Machine.Describe).
	Machines []saga.Description
	// Handled are the message types the new build's plain handlers
	// consume (idem.Engine.Handle): queued messages of these types are
	// served.
	Handled []string
	// Self is the replica ID of the engine that runs the check at its
	// start, left out of the fleet; "" for a check from outside.
	Self string
	// Now is the time replicas are judged alive at; zero means time.Now.
	Now time.Time
	// Sample, when positive, is how many live state documents of each
	// saga type Check reads (the least recently updated first) and
	// decodes with Decoders: each that fails is a StateUndecodable
	// hazard. Zero samples nothing.
	Sample int
	// Decoders decode a stored state document with the new build's
	// upgrade functions, by saga type: each machine's CheckData
	// (DataChecker). A saga type without one is not sampled.
	Decoders map[string]func(data []byte, schemaVersion int) error
}

// ErrNoCensus is returned by Check for a store that cannot count what it
// holds (it is no readmodel.Censuser).
var ErrNoCensus = errors.New("deploycheck: the store cannot count its live sagas (it is no readmodel.Censuser)")

// Check reads what st holds and compares it with o's machines. With
// o.Sample set it also decodes that many live state documents of each
// saga type, and needs a store that is a readmodel.InstanceQuerier
// (ErrNoSample otherwise).
func Check(ctx context.Context, st store.Store, o Options) (*Report, error) {
	cs, ok := st.(readmodel.Censuser)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoCensus, st)
	}
	started := time.Now()
	census, err := cs.Census(ctx)
	if err != nil {
		return nil, fmt.Errorf("deploycheck: %w", err)
	}
	in := Input{Census: census}
	if in.Samples, err = sample(ctx, st, o, census); err != nil {
		return nil, err
	}
	if in.Previous, err = previous(ctx, st, o.Machines, census); err != nil {
		return nil, err
	}
	if rr, ok := st.(store.ReplicaRegistry); ok {
		if in.Replicas, err = rr.Replicas(ctx, maxReplicas); err != nil {
			return nil, fmt.Errorf("deploycheck: read the replicas: %w", err)
		}
	}
	r := Compare(&in, o)
	r.Took = time.Since(started)
	return r, nil
}

// maxReplicas bounds the replicas Check reads.
const maxReplicas = 1000

// previous reads the recorded definitions of every saga type the census
// or the new build names, decoded; a store without a registry has none.
func previous(ctx context.Context, st store.Store, machines []saga.Description, c *readmodel.Census) (map[string][]Recorded, error) {
	ds, ok := st.(store.DefinitionStore)
	if !ok {
		return nil, nil
	}
	types := map[string]bool{}
	for _, m := range machines {
		types[m.Name] = true
	}
	for _, s := range c.States {
		types[s.SagaType] = true
	}
	out := map[string][]Recorded{}
	for t := range types {
		defs, err := ds.Definitions(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("deploycheck: read the definitions of %q: %w", t, err)
		}
		for _, d := range defs {
			r := Recorded{Definition: d}
			if err := json.Unmarshal(d.Description, &r.Description); err != nil {
				r.Description = saga.Description{} // recorded by a build this one cannot read
			}
			out[t] = append(out[t], r)
		}
	}
	return out, nil
}

// Input is what Compare compares the new build with.
type Input struct {
	// Census is what the store holds.
	Census *readmodel.Census
	// Previous are the definitions engines recorded, by saga type, with
	// their descriptions decoded (the zero Description when it could not
	// be).
	Previous map[string][]Recorded
	// Replicas are the engines' heartbeats.
	Replicas []store.Replica
	// Samples are what decoding a sample of the live state documents
	// found (Options.Sample), by saga type; nil when none was taken.
	Samples []Sample
}

// Recorded is a definition an engine recorded, decoded.
type Recorded struct {
	store.Definition
	Description saga.Description
}
