package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// newRetries is `idem retries` and its subcommands.
func newRetries() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "retries",
		Short: "List the messages being retried, and retry them now",
		Long: `A message whose delivery failed waits in its transport for its next attempt;
the store keeps its retry state (attempts, last error, next attempt) until
it is applied or dead-lettered. ls reads the store directly; retry-now and
retry publish the kept message again under its ID through the running
engine's admin API, as the console's "Retry now" does: whichever copy comes
second is a duplicate the engine skips.`,
	}
	cmd.AddCommand(newRetriesLs(), newRetriesRetryNow(), newRetriesRetry())
	return cmd
}

func newRetriesLs() *cobra.Command {
	var sf storeFlags
	var q store.RetryQuery
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--saga-type T] [--limit N] [--json]",
		Short: "List the messages being retried, oldest first failure first",
		Long: `List the messages being retried, by their first failure: saga, message ID
and type, attempts, next attempt and the last error's first line. --json
prints each retry as GET /api/sagas/{type}/{key}/retries does.
` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			rr, ok := st.(store.RetryRecorder)
			if !ok {
				return failed(fmt.Errorf("store %T keeps no retry state", st))
			}
			rs, err := rr.QueryRetries(ctx, &q)
			if err != nil {
				return failed(fmt.Errorf("list retries: %w", err))
			}
			if asJSON {
				if rs == nil {
					rs = []store.Retry{}
				}
				return writeJSON(cmd.OutOrStdout(), rs)
			}
			return printRetries(cmd, rs)
		},
	}
	sf.registerReadOnly(cmd)
	f := cmd.Flags()
	typeFlags(cmd, &q.SagaType, nil, "only the retries of this saga type", "")
	limitFlag(cmd, &q.Limit, store.DefaultRetryPage, "at most this many retries")
	f.BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printRetries(cmd *cobra.Command, rs []store.Retry) error {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SAGA TYPE\tKEY\tID\tMESSAGE TYPE\tATTEMPTS\tNEXT\tERROR")
	for i := range rs {
		r := &rs[i]
		fmt.Fprintf(w, "%s\t%q\t%s\t%s\t%d\t%s\t%s\n", clean(r.SagaType), r.Key, clean(r.ID), clean(r.MessageType), r.Attempts,
			r.NextAttemptAt.UTC().Format(time.RFC3339), clean(firstLine(r.Error)))
	}
	return w.Flush()
}

func newRetriesRetryNow() *cobra.Command {
	var api apiFlags
	cmd := &cobra.Command{
		Use:   "retry-now TYPE KEY ID",
		Short: "Publish a retrying message again now, through the running engine's admin API",
		Long: `Publish the message ID of the saga TYPE/KEY again now, under its own ID
(POST /api/sagas/{type}/{key}/retries/{id}/retry), instead of waiting for
its next attempt. ID is the ID idem retries ls shows. The API refuses (exit
2) a message no longer retrying (404) and one whose retry state was
recorded without its envelope by an older build (409).
` + apiHelp,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" || args[2] == "" {
				return usageErrorf("the saga type and the retry ID must not be empty: idem retries ls lists them")
			}
			key, err := sagaKey(args[1])
			if err != nil {
				return err
			}
			c, err := api.client()
			if err != nil {
				return err
			}
			var acc admin.Accepted
			call := &apiCall{method: http.MethodPost,
				path: "/api/sagas/" + pathSegment(args[0]) + "/" + pathSegment(key) + "/retries/" + pathSegment(args[2]) + "/retry"}
			if err := c.do(cmd.Context(), call, &acc); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %s again as message %s for saga %s/%q\n", clean(acc.Type), clean(acc.ID), clean(args[0]), key)
			return nil
		},
	}
	api.register(cmd)
	return cmd
}

// retrySelected is the answer of GET /api/retries/select.
type retrySelected struct {
	Count   int `json:"count"`
	Retries []struct {
		ID       string `json:"id"`
		Attempts int    `json:"attempts"`
	} `json:"retries"`
	Digest      string `json:"digest"`
	Capped      bool   `json:"capped"`
	Unretryable int    `json:"unretryable"`
}

// retryBatchOptions are the flags of idem retries retry.
type retryBatchOptions struct {
	api                   apiFlags
	sagaType, messageType string
	dryRun, yes           bool
	digest                string
}

func newRetriesRetry() *cobra.Command {
	var o retryBatchOptions
	cmd := &cobra.Command{
		Use:   "retry [--saga-type T] [--message-type M] (--dry-run | --yes --digest D)",
		Short: "Retry now every retrying message a filter selects, through the admin API",
		Long: `Retry now the retrying messages the filter selects, as the console's "Retry
all matching" does. --dry-run counts them (GET /api/retries/select) and
prints a digest of the set, each message at its attempts; --yes --digest D
then publishes exactly that set again (POST /api/retries/retry). If a
message joined or left the set, or failed again, in between, the API
refuses with 409 (exit 2) and nothing is published: count again.
` + apiHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return retryBatch(cmd, &o)
		},
	}
	o.api.register(cmd)
	f := cmd.Flags()
	typeFlags(cmd, &o.sagaType, &o.messageType, "only the retries of this saga type", "only the retries of this message type")
	f.BoolVar(&o.dryRun, "dry-run", false, "count the messages and print the digest; publish none")
	f.BoolVar(&o.yes, "yes", false, "publish the set --digest names")
	f.StringVar(&o.digest, "digest", "", "the digest --dry-run printed")
	return cmd
}

func retryBatch(cmd *cobra.Command, o *retryBatchOptions) error {
	switch {
	case o.dryRun && (o.yes || o.digest != ""):
		return usageErrorf("--dry-run counts only: drop --yes and --digest")
	case !o.dryRun && (!o.yes || o.digest == ""):
		return usageErrorf("say --dry-run to count the messages, then --yes --digest D with the digest it printed")
	}
	c, err := o.api.client()
	if err != nil {
		return err
	}
	filter := url.Values{}
	if o.sagaType != "" {
		filter.Set("saga_type", o.sagaType)
	}
	if o.messageType != "" {
		filter.Set("message_type", o.messageType)
	}
	if o.dryRun {
		var sel retrySelected
		if err := c.do(cmd.Context(), &apiCall{method: http.MethodGet, path: "/api/retries/select", query: filter}, &sel); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%d retrying messages (%d kept without their envelope: skipped); digest %s\nto retry exactly these: %s\n",
			sel.Count, sel.Unretryable, sel.Digest, rerun(cmd, []string{"dry-run", "yes", "digest"}, "--yes", "--digest", hintWord(sel.Digest)))
		if sel.Capped {
			fmt.Fprintln(cmd.ErrOrStderr(), "the filter selects more messages than one batch takes: narrow it")
		}
		return nil
	}
	var res admin.RetryNowResult
	call := &apiCall{method: http.MethodPost, path: "/api/retries/retry", query: filter, body: admin.RetryNowBatch{Digest: o.digest}}
	if err := c.do(cmd.Context(), call, &res); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "published %d messages again; %d skipped (no envelope kept)\n", res.Done, len(res.Skipped))
	return nil
}
