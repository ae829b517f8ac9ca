package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// token reports whether run measures the token inbox.
func (run *EngineRun) token() bool { return run.Dedup == idem.DedupToken.String() }

// mintTokens plays the sender of the token inbox for the workload: it mints
// one token per distinct message, once, and marks every copy with
// transport.HeaderToken, so that the copies the workload repeats are what a
// transport's redeliveries would be. It runs before the measured phase, as
// the pre-enqueue does.
func mintTokens(ctx context.Context, st store.TokenStore, envs []idem.Envelope) error {
	seen := map[string]bool{}
	var ts []store.Token
	now := time.Now()
	for i := range envs {
		envs[i].Headers[transport.HeaderToken] = "1"
		id := idem.TokenID(&envs[i])
		if !seen[id] {
			seen[id] = true
			ts = append(ts, store.Token{ID: id, MintedAt: now})
		}
	}
	for start := 0; start < len(ts); start += 1000 {
		if err := st.MintTokens(ctx, ts[start:min(start+1000, len(ts))]); err != nil {
			return fmt.Errorf("mint tokens: %w", err)
		}
	}
	return nil
}

// verifyTokens checks the token inbox after a run: every incoming
// message's token was claimed, and every emitted message has one (the
// emitted messages are not consumed in the benchmark), so one token per
// distinct message is left.
func verifyTokens(ctx context.Context, st store.TokenStore, w *Workload) ([]string, error) {
	n, err := st.CountTokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if n != w.Distinct {
		return []string{fmt.Sprintf("idem_tokens holds %d tokens, want one per emitted message (%d): every incoming token claimed", n, w.Distinct)}, nil
	}
	return nil, nil
}

// dedups returns the modes to run.
func (r *runner) dedups() []idem.Dedup {
	if len(r.o.Dedups) == 0 {
		return []idem.Dedup{idem.DedupRetention}
	}
	return r.o.Dedups
}

// dedupOf is run's Config.Dedup.
func dedupOf(run *EngineRun) idem.Dedup {
	if run.token() {
		return idem.DedupToken
	}
	return idem.DedupRetention
}

// verify runs the exactly-once checks of a session, with the token
// inbox's in a token run.
func (s *session) verify(ctx context.Context, run *EngineRun, w *Workload) ([]string, error) {
	problems, err := verify(ctx, s.st.Pool(), w, "idem_journal", s.emitted)
	if err != nil || !run.token() {
		return problems, err
	}
	more, err := verifyTokens(ctx, s.st, w)
	return append(problems, more...), err
}
