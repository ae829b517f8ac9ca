package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// defaultMigrateBatch is how many sagas one transaction of idem deploy
// migrate moves by default.
const defaultMigrateBatch = 500

// migrateActor is the Actor of the journal entries idem deploy migrate
// writes: who moved the saga, in the console's history.
const migrateActor = "idem deploy migrate"

// deployMigrateFlags are the flags of idem deploy migrate.
type deployMigrateFlags struct {
	sf          storeFlags
	definitions string
	sagaType    string
	batch       int
	dryRun      bool
	progress    bool
}

// stateMove is one declared state migration to apply eagerly, with the
// count the store holds in From and, after the pass, the count moved.
type stateMove struct {
	SagaType, From, To string
	final              bool // To is a final state: left to the lazy path
	count, moved       int64
	// left is what the store still counted in From when the pass stopped
	// with units of work in flight holding those sagas.
	left int64
}

func newDeployMigrate() *cobra.Command {
	var f deployMigrateFlags
	cmd := &cobra.Command{
		Use:   "migrate [--definitions FILE|-] [--saga-type T] [--batch N] [--dry-run] [--progress]",
		Short: "Apply the declared state migrations (MigrateState) to every stored saga now, in batches",
		Long: `Move every saga stored in a state that a declared state migration
(saga.Machine.MigrateState) maps to another, instead of waiting for each
saga's next message to migrate it on load. Each batch of --batch sagas is
one transaction: every saga moved gets its version bumped (a unit of work
that loaded it before conflicts and retries) and a journal entry of event
idem.StateMigrated from the old state to the new, with message ID
idem.migrate/FROM>TO and actor "idem deploy migrate", as the lazy path
writes. A killed run loses at most its open batch; run it again and it
continues. A second run moves 0.

It prints, per saga type and migration, how many sagas it moved; --dry-run
prints how many it would move (live and finished sagas in the old state)
and moves nothing. Run it once every replica runs the new build: a replica
of the old build may still move sagas into the old state.

The migrations are those this binary's machines declare (those idem graph
lists) or, with --definitions FILE (- for stdin), those of the JSON idem
graph --format json prints (the "migrations" of kind "state").
--saga-type T applies only T's. A migration into a final state is left to
the lazy path (the saga's next message finishes it, cancelling its timers),
and is listed as such. Message renames (RenameMessage) need no eager pass:
they apply to each message as it is decoded. --progress (on by default)
shows a progress bar on stderr while the sagas move.

Exit status: 0 done (or nothing to do), 1 the store failed (what was
moved stays moved; run again to continue), 2 a usage error (bad flags, bad
--definitions input, an unknown --saga-type, a migration the store refuses,
a store that cannot migrate).
` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDeployMigrate(cmd, &f) },
	}
	f.sf.registerReadOnly(cmd)
	cmd.Flags().StringVar(&f.definitions, "definitions", "", "read the machines' migrations from this file (- for stdin): the JSON of idem graph --format json")
	cmd.Flags().StringVar(&f.sagaType, "saga-type", "", "apply only this saga type's migrations")
	cmd.Flags().IntVar(&f.batch, "batch", defaultMigrateBatch, "sagas moved per transaction")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "print how many sagas each migration would move, and move none")
	cmd.Flags().BoolVar(&f.progress, "progress", true, "show a progress bar on stderr")
	return cmd
}

func runDeployMigrate(cmd *cobra.Command, f *deployMigrateFlags) error {
	moves, renames, err := f.moves(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st, _, err := f.sf.open(ctx, false)
	if err != nil {
		return err
	}
	defer st.Close()
	sm, ok := st.(store.StateMigrator)
	if !ok {
		return usageErrorf("the store %s cannot move sagas between states (%T is no store.StateMigrator): use pgstore or sqlitestore, or let the migrations apply on load", redactURL(f.sf.url), st)
	}
	if err := countMoves(ctx, sm, moves); err != nil {
		return failed(err)
	}
	out := cmd.OutOrStdout()
	if !f.dryRun {
		err = f.apply(ctx, cmd.ErrOrStderr(), sm, moves)
	}
	writeMoves(out, moves, f.dryRun)
	if renames > 0 {
		fmt.Fprintf(out, "%d message rename(s) (RenameMessage) need no eager pass: each applies as its message is decoded.\n", renames)
	}
	switch {
	case errors.Is(err, store.ErrRejected):
		return usageErrorf("deploy migrate: %v: correct the migration in the machine's declaration or the --definitions file", err)
	case err != nil:
		return failed(fmt.Errorf("deploy migrate: %w (what was moved stays moved: run again to continue)", err))
	}
	return nil
}

// moves are the state migrations the flags select, in saga type and from
// order, and how many message renames they leave aside.
func (f *deployMigrateFlags) moves(cmd *cobra.Command) ([]*stateMove, int, error) {
	if f.batch <= 0 {
		return nil, 0, usageErrorf("--batch is %d: give how many sagas to move per transaction (default %d)", f.batch, defaultMigrateBatch)
	}
	var ds []saga.Description
	if f.definitions != "" {
		var err error
		if ds, err = readDefinitions(cmd.InOrStdin(), f.definitions); err != nil {
			return nil, 0, err
		}
	} else {
		for _, m := range exampleMachines() {
			ds = append(ds, m.Describe())
		}
	}
	if f.sagaType != "" {
		i := slices.IndexFunc(ds, func(d saga.Description) bool { return d.Name == f.sagaType })
		if i < 0 {
			return nil, 0, usageErrorf("--saga-type %s: no such machine; the machines are %s", clean(f.sagaType), machineNames(ds))
		}
		ds = ds[i : i+1]
	}
	var moves []*stateMove
	renames := 0
	for _, d := range ds {
		for _, m := range d.Migrations {
			if m.Kind != saga.MigrateStateKind {
				renames++
				continue
			}
			final := slices.ContainsFunc(d.States, func(s saga.StateDescription) bool { return string(s.Name) == m.To && s.Final })
			moves = append(moves, &stateMove{SagaType: d.Name, From: m.From, To: m.To, final: final})
		}
	}
	slices.SortFunc(moves, func(a, b *stateMove) int {
		return strings.Compare(a.SagaType+"\x00"+a.From, b.SagaType+"\x00"+b.From)
	})
	return moves, renames, nil
}

// machineNames lists the saga types of ds, quoted where needed.
func machineNames(ds []saga.Description) string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = clean(d.Name)
	}
	return strings.Join(names, ", ")
}

// countMoves sets each move's count: the sagas stored in its From.
func countMoves(ctx context.Context, sm store.StateMigrator, moves []*stateMove) error {
	for _, m := range moves {
		n, err := sm.CountState(ctx, m.SagaType, m.From)
		if err != nil {
			return fmt.Errorf("deploy migrate: %w", err)
		}
		m.count = n
	}
	return nil
}

// apply moves the sagas of each move not into a final state, batch by
// batch, until a batch moves none, showing the progress on stderr.
func (f *deployMigrateFlags) apply(ctx context.Context, stderr io.Writer, sm store.StateMigrator, moves []*stateMove) error {
	var total int64
	for _, m := range moves {
		if !m.final {
			total += m.count
		}
	}
	bar := newProgressOf(f.progress && total > 0, stderr, stderr, int(total), "idem deploy migrate", "sagas migrated")
	var done int64
	for _, m := range moves {
		if m.final || m.count == 0 {
			continue
		}
		err := migrateAll(ctx, sm, m, f.batch, func(n int) {
			done += int64(n)
			if bar != nil {
				bar.Set(int(min(done, total)))
			}
		})
		if err != nil {
			return err
		}
	}
	if bar != nil {
		bar.Finish()
	}
	return nil
}

// maxEmptyBatches is how many calls in a row may move none while the store
// still counts sagas in the old state (units of work in flight hold them:
// PostgreSQL's pass skips them) before migrateAll stops, and how many in a
// row may conflict with the engines' commits before it fails. Between
// such calls it waits emptyBatchWait, doubled each time, for those units
// of work to commit.
const maxEmptyBatches = 6

// emptyBatchWait is the first wait after a call that moved none.
var emptyBatchWait = 50 * time.Millisecond

// migrateAll moves m's sagas in batches of batch until none is left in
// m.From, calling moved after each batch.
func migrateAll(ctx context.Context, sm store.StateMigrator, m *stateMove, batch int, moved func(int)) error {
	p := &store.MigrateStatesParams{SagaType: m.SagaType, From: m.From, To: m.To, Limit: batch, EventType: saga.MigrationEvent, Actor: migrateActor}
	for empty, conflicts := 0, 0; empty < maxEmptyBatches; {
		p.At = time.Now().UTC()
		n, err := sm.MigrateStates(ctx, p)
		if errors.Is(err, store.ErrConflict) && conflicts < maxEmptyBatches {
			conflicts++ // the batch moved nothing: try it again
			continue
		}
		if err != nil {
			return err
		}
		conflicts = 0
		if n > 0 {
			empty = 0
			m.moved += int64(n)
			moved(n)
			continue
		}
		left, err := sm.CountState(ctx, m.SagaType, m.From)
		if err != nil || left == 0 {
			return err
		}
		m.left = left
		if empty++; empty < maxEmptyBatches {
			if err := sleepCtx(ctx, emptyBatchWait<<(empty-1)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C: // units of work in flight committing: a pause, not a synchronisation
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeMoves prints a row per move: what it moved, or with dryRun what it
// would move.
func writeMoves(w io.Writer, moves []*stateMove, dryRun bool) {
	if len(moves) == 0 {
		fmt.Fprintln(w, "no state migration (MigrateState) declared: nothing to move.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "MOVED"
	if dryRun {
		head = "WOULD MOVE"
	}
	fmt.Fprintf(tw, "SAGA TYPE\tFROM\tTO\t%s\tNOTE\n", head)
	var sum int64
	for _, m := range moves {
		n, note := m.moved, "-"
		if dryRun {
			n = m.count
		}
		if m.final {
			n, note = 0, fmt.Sprintf("%d left to migrate on load: the target is a final state", m.count)
		}
		if !dryRun && !m.final && m.left > 0 {
			note = fmt.Sprintf("%d left, held by units of work in flight: they migrate on load", m.left)
		}
		sum += n
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", clean(m.SagaType), clean(m.From), clean(m.To), n, note)
	}
	_ = tw.Flush()
	if dryRun {
		fmt.Fprintf(w, "dry run: %d saga(s) would move; nothing was changed.\n", sum)
		return
	}
	fmt.Fprintf(w, "%d saga(s) moved.\n", sum)
}
