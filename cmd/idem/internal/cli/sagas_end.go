package cli

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// newSagasEnd is `idem sagas end TYPE KEY --reason R`.
func newSagasEnd() *cobra.Command {
	var sf storeFlags
	var reason string
	var version int64
	cmd := &cobra.Command{
		Use:   "end TYPE KEY --reason R [--version N]",
		Short: "End a saga: move it to the final state idem.ended and cancel its timers",
		Long: `End the saga TYPE/KEY: in one transaction it moves to the final state
idem.ended, its timers (its requests' deadlines included) are cancelled, and
the journal records the reason and who ended it (cli: the OS user). Every
event that arrives for it afterwards is ignored. --version N ends it only if
it is still at version N (see idem sagas show). Exits 1 when there is no
such saga, it has finished already, or it changed meanwhile.
` + storeHelp,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := sagaKey(args[1])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			k := store.Key{SagaType: args[0], Key: key}
			e := &inspect.End{Reason: reason, Actor: cliActor(), Version: version, Now: time.Now()}
			entry, err := inspect.EndSaga(ctx, st, k, e)
			switch {
			case errors.Is(err, inspect.ErrBadReason):
				return usageErrorf("--reason: %v", err)
			case err != nil:
				return failed(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ended saga %s/%q (was %s; now version %d)\n", k.SagaType, k.Key, clean(entry.FromState), entry.Version)
			return nil
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&reason, "reason", "", "why the saga is ended (required; the journal keeps it)")
	cmd.Flags().Int64Var(&version, "version", 0, "end it only if it is still at this version")
	return cmd
}

// cliActor names who runs the CLI for the journal.
func cliActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "cli: " + u.Username
	}
	if h, err := os.Hostname(); err == nil {
		return "cli@" + h
	}
	return "cli"
}
