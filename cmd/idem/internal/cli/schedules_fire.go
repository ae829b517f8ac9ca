package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

// newSchedulesFire is `idem schedules fire NAME --tick T`.
func newSchedulesFire() *cobra.Command {
	var api apiFlags
	var tick string
	cmd := &cobra.Command{
		Use:   "fire NAME --tick T",
		Short: "Fire a schedule's next tick now, through the running engine's admin API",
		Long: `Fire the tick T of the schedule NAME now, as the console's "fire now" does
(POST /api/schedules/{name}/fire?tick=T): the tick's message goes out under
the tick's own ID, the one a replica firing it on time would use, and the
schedule moves past it, so the tick fires once however often it is asked.

--tick is required: it is the NEXT time idem schedules ls shows (RFC 3339).
Firing is bound to the tick the operator saw: if that tick has fired
meanwhile (on time, or by a second fire), the API refuses with 409 instead
of firing the tick after it, so running the command twice never fires two
ticks.
` + apiHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := idem.ValidateScheduleName(name); err != nil {
				return usageErrorf("%v", err)
			}
			if tick == "" {
				return usageErrorf("--tick is required: the NEXT time idem schedules ls shows for %s, which is the tick fired", clean(name))
			}
			t, err := time.Parse(time.RFC3339Nano, tick)
			if err != nil {
				return usageErrorf("--tick %s is not an RFC 3339 time: copy the NEXT time idem schedules ls shows", clean(tick))
			}
			c, err := api.client()
			if err != nil {
				return err
			}
			var f admin.FiredTick
			call := &apiCall{method: http.MethodPost, path: "/api/schedules/" + pathSegment(name) + "/fire",
				query: url.Values{"tick": {t.UTC().Format(time.RFC3339Nano)}}}
			if err := c.do(cmd.Context(), call, &f); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fired tick %s of schedule %s as message %s; next due %s\n",
				f.Tick.UTC().Format(time.RFC3339Nano), clean(name), clean(f.MessageID), f.NextDue.UTC().Format(time.RFC3339Nano))
			return nil
		},
	}
	api.register(cmd)
	cmd.Flags().StringVar(&tick, "tick", "", "the tick to fire: the NEXT time idem schedules ls shows (required)")
	return cmd
}
