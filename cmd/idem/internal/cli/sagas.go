package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// newSagas is `idem sagas ls|show`: saga instances as the store holds them.
func newSagas() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sagas",
		Short: "List saga instances, show one with its journal, end one, send one an event",
		Long: `Read saga instances straight from the store: ls lists them a page at a
time, ordered by saga type and key; show prints one instance with its state
document and its journal of transitions. send goes through the running
engine's admin API instead (--api, IDEM_API_URL): see idem sagas send --help.

The store comes from --store (default IDEM_STORE): postgres://… or
sqlite:///path. Exit status: 0 done; 1 the named saga does not exist; 2 usage
or configuration errors.`,
	}
	cmd.AddCommand(newSagasLs(), newSagasShow(), newSagasEnd(), newSagasSend())
	return cmd
}

func newSagasLs() *cobra.Command {
	var sf storeFlags
	var p store.ListParams
	var asJSON bool
	var q readmodel.InstanceQuery
	var attrs []string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List saga instances, one page at a time",
		Long: `List saga instances ordered by saga type and key. --saga-type keeps one saga
type (a type the store holds no instance of is an error, exit 1: a typo
should not pass for an empty list), --state one state of its machine;
--limit sets the page size (default 100, at most 1000) and --after the
cursor of the page. When a page is full, the command for the next one is
printed on stderr, with your flags; its cursor is an opaque token of
letters, digits, '-' and '_', safe to type in a shell.

--status active|finished, --prefix P (keys starting with P, in any Unicode
spelling: it is compared in the NFC form keys are stored in) and --stuck
(active instances, least recently updated first: the ones to look at) need
a store that implements readmodel.InstanceQuerier, as every bundled store does.

--attr name=value keeps the instances whose business attribute (declared with
saga.Machine.Attribute) has that value; repeat it to require several (they
are ANDed). Values are compared in Unicode NFC form, so any spelling of
"Müller" finds it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			if q.Attributes, err = inspect.ParseAttributes(attrs); err != nil {
				return usageErrorf("--attr: %v", err)
			}
			q.KeyPrefix = canon.Prefix(q.KeyPrefix)
			filtered := q.Status != "" || q.KeyPrefix != "" || q.Stuck || len(q.Attributes) > 0
			var list []*store.Instance
			if filtered {
				list, err = queryInstances(ctx, st, &p, &q)
			} else {
				list, err = listInstances(ctx, st, p)
			}
			if err != nil {
				if _, ok := errors.AsType[*exitError](err); ok {
					return err
				}
				return &exitError{code: 1, err: err}
			}
			if len(list) == 0 && p.SagaType != "" && p.After == "" {
				if err := knownSagaType(ctx, st, p.SagaType); err != nil {
					return err
				}
			}
			if err := writeInstances(cmd.OutOrStdout(), list, asJSON); err != nil {
				return failed(err)
			}
			if len(list) == p.Limit {
				fmt.Fprint(cmd.ErrOrStderr(), moreHint(cmd, inspect.InstanceCursor(list[len(list)-1])))
			}
			return nil
		},
	}
	sf.registerReadOnly(cmd)
	typeFlags(cmd, &p.SagaType, nil, "only instances of this saga type", "")
	cmd.Flags().StringVar(&p.State, "state", "", "only instances in this state")
	cmd.Flags().StringVar(&q.Status, "status", "", "only active or finished instances")
	cmd.Flags().StringVar(&q.KeyPrefix, "prefix", "", "only instances whose key starts with this")
	cmd.Flags().BoolVar(&q.Stuck, "stuck", false, "only active instances, least recently updated first")
	cmd.Flags().StringArrayVar(&attrs, "attr", nil, "only instances with this business attribute, name=value (repeatable, ANDed)")
	cmd.Flags().StringVar(&p.After, "after", "", "cursor printed by the previous page")
	limitFlag(cmd, &p.Limit, 100, "page size")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// knownSagaType returns an error (exit 1) when the store holds no
// instance of sagaType, naming the types it holds: sagas ls then says so
// rather than "no sagas".
func knownSagaType(ctx context.Context, st store.Store, sagaType string) error {
	some, err := st.ListInstances(ctx, &store.ListParams{SagaType: sagaType, Limit: 1})
	if err != nil {
		return failed(err)
	}
	if len(some) > 0 {
		return nil
	}
	counts, _, err := inspect.Counts(ctx, st)
	if err != nil {
		return failed(err)
	}
	var types []string
	for i, c := range counts { // in saga type order
		if i == 0 || counts[i-1].SagaType != c.SagaType {
			types = append(types, clean(c.SagaType))
		}
	}
	holds := "no saga at all"
	if len(types) > 0 {
		holds = "sagas of the types " + strings.Join(types, ", ")
	}
	return failed(fmt.Errorf("no saga of type %s in this store: it holds %s", strconv.Quote(sagaType), holds))
}

// writeInstances prints a page of sagas ls: a JSON array, a table, or
// "no sagas".
func writeInstances(w io.Writer, list []*store.Instance, asJSON bool) error {
	if asJSON {
		out := make([]instanceJSON, len(list))
		for i, in := range list {
			out[i] = toInstanceJSON(in)
		}
		return writeJSON(w, out)
	}
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no sagas")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SAGA TYPE\tKEY\tSTATE\tVERSION\tUPDATED\tFINISHED\tATTRIBUTES")
	for _, in := range list {
		fmt.Fprintf(tw, "%s\t%q\t%s\t%d\t%s\t%s\t%s\n", clean(in.SagaType), in.Key, clean(in.State), in.Version, in.UpdatedAt.Format(time.RFC3339), timeOrDash(in.FinishedAt), attributesOrDash(in.Attributes))
	}
	return tw.Flush()
}

// listInstances is sagas ls without filters: p.After holds --after.
func listInstances(ctx context.Context, st store.Store, p store.ListParams) ([]*store.Instance, error) {
	if p.After != "" {
		c, err := parseCursor(p.After)
		if err != nil {
			return nil, err
		}
		p.After = inspect.ListAfter(c)
	}
	return st.ListInstances(ctx, &p)
}

func newSagasShow() *cobra.Command {
	var sf storeFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show TYPE KEY",
		Short: "Show one saga instance with its state document and journal",
		Long: `Show the saga instance TYPE/KEY: state, version, timers, the state document
and the journal of its transitions in order. Exit 1 if there is no such
instance.

--json prints the instance, and its journal as GET
/api/sagas/{type}/{key}/history answers: each entry's payload as JSON when
it is JSON ("payload_encoding": "json"), else its text ("utf-8") or its
base64 ("base64"), with its headers, IDs, emitted messages and state diff.
An emitted message's "sent" is read from the store's outbox: "unknown" when
it is not there (the engines run on the store's own queue, or it was swept).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			key, err := sagaKey(args[1])
			if err != nil {
				return err
			}
			k := store.Key{SagaType: args[0], Key: key}
			uow, err := st.Begin(ctx)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
			_ = uow.Rollback(ctx)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			in := res.Instances[k]
			if in == nil {
				return &exitError{code: 1, err: fmt.Errorf("no saga %s with key %q: list them with %s", clean(k.SagaType), k.Key, onStore(cmd, "idem sagas ls", "--saga-type", hintWord(k.SagaType)))}
			}
			journal, err := st.Journal(ctx, k)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if asJSON {
				return showJSON(ctx, cmd.OutOrStdout(), st, in, journal)
			}
			writeInstance(cmd.OutOrStdout(), in, journal)
			return nil
		},
	}
	sf.registerReadOnly(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// showJSON prints sagas show --json: the instance, and its journal as
// GET /api/sagas/{type}/{key}/history shows it (inspect.HistoryOf).
func showJSON(ctx context.Context, w io.Writer, st store.Store, in *store.Instance, journal []store.JournalEntry) error {
	h, err := inspect.HistoryOf(ctx, st, store.Key{SagaType: in.SagaType, Key: in.Key}, journal)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	return writeJSON(w, struct {
		instanceJSON
		Journal []admin.HistoryEntry `json:"journal"`
	}{toInstanceJSON(in), h.Entries})
}

// writeInstance prints sagas show in the layout of dlq show: labelled
// lines, then the timers, the state document and the journal, indented.
func writeInstance(w io.Writer, in *store.Instance, journal []store.JournalEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, value) }
	field("Saga", clean(in.SagaType+"/"+in.Key))
	field("State", clean(in.State))
	field("Status", in.Status())
	field("Version", strconv.FormatInt(in.Version, 10))
	field("Schema version", strconv.Itoa(in.SchemaVersion))
	field("Created", formatTime(in.CreatedAt))
	field("Updated", formatTime(in.UpdatedAt))
	field("Finished", formatTime(in.FinishedAt))
	field("Attributes", attributesOrDash(in.Attributes))
	_ = tw.Flush()

	if len(in.Timers) == 0 {
		fmt.Fprintln(w, "Timers: none")
	} else {
		fmt.Fprintln(w, "Timers (name: message ID):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, name := range slices.Sorted(maps.Keys(in.Timers)) {
			fmt.Fprintf(tw, "  %s:\t%s\n", clean(name), clean(in.Timers[name]))
		}
		_ = tw.Flush()
	}

	body, kind := renderBody(in.Data)
	fmt.Fprintf(w, "Data (%d bytes, %s):\n", len(in.Data), kind)
	fmt.Fprint(w, indent(body))

	if len(journal) == 0 {
		fmt.Fprintln(w, "Journal: empty")
		return
	}
	fmt.Fprintln(w, "Journal:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  AT\tMESSAGE\tEVENT\tFROM\tTO\tVERSION")
	for _, j := range journal {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\n", formatTime(j.At), clean(j.MessageID), clean(j.EventType), clean(j.FromState), clean(j.ToState), j.Version)
	}
	_ = tw.Flush()
}

type instanceJSON struct {
	SagaType      string            `json:"saga_type"`
	Key           string            `json:"key"`
	State         string            `json:"state"`
	Version       int64             `json:"version"`
	SchemaVersion int               `json:"schema_version"`
	Data          json.RawMessage   `json:"data"`
	Timers        map[string]string `json:"timers,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	FinishedAt    *time.Time        `json:"finished_at,omitempty"`
	Attributes    map[string]string `json:"attributes,omitempty"`
}

func toInstanceJSON(in *store.Instance) instanceJSON {
	out := instanceJSON{SagaType: in.SagaType, Key: in.Key, State: in.State, Version: in.Version, SchemaVersion: in.SchemaVersion,
		Data: json.RawMessage(in.Data), Timers: in.Timers, CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt, Attributes: in.Attributes}
	if !json.Valid(in.Data) {
		out.Data, _ = json.Marshal(string(in.Data))
	}
	if !in.FinishedAt.IsZero() {
		f := in.FinishedAt
		out.FinishedAt = &f
	}
	return out
}

// attributesOrDash prints attributes as name="value" pairs (values quoted,
// as keys are), or "-" when there are none.
func attributesOrDash(attrs map[string]string) string {
	if len(attrs) == 0 {
		return "-"
	}
	quoted := make(map[string]string, len(attrs))
	for n, v := range attrs {
		quoted[n] = strconv.Quote(v)
	}
	return inspect.FormatAttributes(quoted, " ")
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}
