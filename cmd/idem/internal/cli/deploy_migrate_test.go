package cli

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// renamedState is d with state old renamed to new everywhere, and the
// state migration from old to new declared.
func renamedState(d saga.Description, old, new saga.State) saga.Description {
	swap := func(ss []saga.State) []saga.State {
		out := slices.Clone(ss)
		for i := range out {
			if out[i] == old {
				out[i] = new
			}
		}
		return out
	}
	d.States = slices.Clone(d.States)
	for i := range d.States {
		if d.States[i].Name == old {
			d.States[i].Name = new
		}
	}
	d.Transitions = slices.Clone(d.Transitions)
	for i := range d.Transitions {
		d.Transitions[i].From, d.Transitions[i].To = swap([]saga.State{d.Transitions[i].From})[0], swap([]saga.State{d.Transitions[i].To})[0]
	}
	d.Events = slices.Clone(d.Events)
	for i := range d.Events {
		d.Events[i].HandledIn, d.Events[i].IgnoredIn = swap(d.Events[i].HandledIn), swap(d.Events[i].IgnoredIn)
	}
	d.Migrations = []saga.MigrationDescription{{Kind: saga.MigrateStateKind, From: string(old), To: string(new)}}
	return d
}

// idem deploy migrate on the demo's order sagas, with a build that renamed
// AwaitingPayment (three live sagas) to Awaiting: the dry run counts 3 and
// moves none, the run moves 3 in batches of 2 and journals each, a second
// run moves 0.
func TestDeployMigrate(t *testing.T) {
	t.Parallel()
	url, path := seedOrders(t)
	d := renamedState(orders.OrderMachine().Describe(), "AwaitingPayment", "Awaiting")
	defs := writeDefinitions(t, describedMachine{Fingerprint: d.Fingerprint(), Description: d})
	args := []string{"deploy", "migrate", "--definitions", defs, "--store", url, "--batch", "2"}

	code, out, errOut := run(t, append(args, "--dry-run")...)
	if code != 0 || !hasRow(out, "order", "AwaitingPayment", "Awaiting", "3") || !strings.Contains(out, "dry run: 3 saga(s) would move") {
		t.Fatalf("deploy migrate --dry-run: exit %d\nstdout: %s\nstderr: %s\nwant exit 0 and 3 sagas that would move", code, out, errOut)
	}
	t.Logf("idem deploy migrate --dry-run\n%s", out)
	st := openSQLite(t, path)
	if n, err := st.CountState(t.Context(), "order", "AwaitingPayment"); err != nil || n != 3 {
		t.Fatalf("after the dry run: %d sagas in AwaitingPayment (%v), want 3: the dry run moved some", n, err)
	}

	code, out, errOut = run(t, args...)
	if code != 0 || !hasRow(out, "order", "AwaitingPayment", "Awaiting", "3") || !strings.Contains(out, "3 saga(s) moved") {
		t.Fatalf("deploy migrate: exit %d\nstdout: %s\nstderr: %s\nwant exit 0 and 3 sagas moved", code, out, errOut)
	}
	t.Logf("idem deploy migrate --batch 2\n%s%s", out, errOut)
	waitCensus(t, st, map[string]int64{"Awaiting": 3})
	for _, k := range []string{"o-2", "o-3", "o-4"} {
		js, err := st.Journal(t.Context(), store.Key{SagaType: "order", Key: k})
		if err != nil || len(js) == 0 {
			t.Fatalf("journal of order/%s: %v, %d entries", k, err, len(js))
		}
		j := js[len(js)-1]
		if j.EventType != saga.MigrationEvent || j.FromState != "AwaitingPayment" || j.ToState != "Awaiting" || j.Actor != migrateActor || len(j.State) == 0 {
			t.Errorf("last journal entry of order/%s: got %+v, want %s AwaitingPayment>Awaiting by %q with the stored document", k, j, saga.MigrationEvent, migrateActor)
		}
	}

	code, out, errOut = run(t, args...)
	if code != 0 || !hasRow(out, "order", "AwaitingPayment", "Awaiting", "0") {
		t.Errorf("second deploy migrate: exit %d\nstdout: %s\nstderr: %s\nwant exit 0 and 0 moved", code, out, errOut)
	}
}

// Bad flags, and a migration into a state no store keeps, stop with exit
// 2 and say what to change; this binary's machines declare no state
// migration, so a run moves nothing.
func TestDeployMigrateUsage(t *testing.T) {
	t.Parallel()
	url, _ := seedOrders(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch", "0"}, "--batch is 0"},
		{[]string{"--saga-type", "nope\x00"}, `--saga-type "nope\x00": no such machine`},
	} {
		code, _, errOut := run(t, append([]string{"deploy", "migrate", "--store", url}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("deploy migrate %q: exit %d, stderr %s; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
	d := orders.OrderMachine().Describe()
	d.Migrations = []saga.MigrationDescription{{Kind: saga.MigrateStateKind, From: "AwaitingPayment", To: "Bad\x00<script>"}}
	defs := writeDefinitions(t, d)
	code, out, errOut := run(t, "deploy", "migrate", "--store", url, "--definitions", defs)
	if code != 2 || !strings.Contains(errOut, `To "Bad\x00<script>" is not valid UTF-8 or holds U+0000`) {
		t.Errorf("deploy migrate to a state holding U+0000: exit %d\nstdout: %s\nstderr: %s\nwant exit 2 naming the state", code, out, errOut)
	}
	code, out, errOut = run(t, "deploy", "migrate", "--store", url)
	if code != 0 || !strings.Contains(out, "no state migration (MigrateState) declared") {
		t.Errorf("deploy migrate with this binary's machines: exit %d\nstdout: %s\nstderr: %s\nwant exit 0, nothing to move", code, out, errOut)
	}
}

// openSQLite opens the store at path for the test's reads.
func openSQLite(t *testing.T, path string) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), path, &sqlitestore.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}
