package idem

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/idemhq/idem/deploycheck"
)

// checkDeploy runs the deploy check (Config.DeployCheck): the registered
// machines against what the store holds. It runs before the schedules
// and definitions checks, so a build it refuses writes nothing: neither
// its schedules nor its definitions.
func checkDeploy(ctx context.Context, su *startup) checkResult {
	if su.cfg.DeployCheck == DeployCheckOff {
		return passed()
	}
	r, err := deploycheck.Check(ctx, su.store, deployOptions(su))
	switch {
	case errors.Is(err, deploycheck.ErrNoCensus):
		return warned(fmt.Sprintf("%v: the deploy check cannot run on this store; set Config.DeployCheck off", err))
	case err != nil:
		return warned(fmt.Sprintf("the deploy check could not read the store, so this build was not checked: %v", err))
	}
	for _, n := range r.Notices {
		su.log.InfoContext(ctx, "deploy check notice", "kind", n.Kind, "saga_type", n.SagaType, "detail", n.Detail)
	}
	if r.OK() {
		return passed()
	}
	if su.cfg.DeployCheck == DeployCheckWarn {
		return warned(r.Error().Error())
	}
	return refused(fmt.Errorf("idem: start: %w (docs/deploys.md says what each means; Config.DeployCheck %q lets it start anyway)", r.Error(), DeployCheckWarn))
}

// deployOptions describes the registered machines and plain handlers for
// the deploy check, with each machine's decoder for the sample
// (Config.DeployCheckSample).
func deployOptions(su *startup) deploycheck.Options {
	o := deploycheck.Options{Self: su.replicaID, Now: su.cfg.Clock(), Handled: slices.Sorted(maps.Keys(su.reg.handlers)),
		Sample: su.cfg.DeployCheckSample, Decoders: map[string]func([]byte, int) error{}}
	for _, name := range slices.Sorted(maps.Keys(su.reg.sagas)) {
		m := su.reg.sagas[name]
		o.Machines = append(o.Machines, m.Describe())
		if dc, ok := m.(deploycheck.DataChecker); ok {
			o.Decoders[name] = dc.CheckData
		}
	}
	return o
}
