package cli

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/admin"
)

// sendOptions are the flags of idem sagas send.
type sendOptions struct {
	api      apiFlags
	event    string
	body     string
	bodyFile string
	id       string
}

// newSagasSend is `idem sagas send TYPE KEY --event T --body JSON`.
func newSagasSend() *cobra.Command {
	var o sendOptions
	cmd := &cobra.Command{
		Use:   "send TYPE KEY --event T (--body JSON | --body-file F) [--id ID]",
		Short: "Send an event to a saga through the running engine's admin API",
		Long: `Send the event T with the JSON body to the saga TYPE/KEY, as the console's
send form does (POST /api/sagas/{type}/{key}/events). The engine checks that
the saga's machine takes T and that the body correlates to KEY, then
publishes it; the command prints the message ID it was sent under. Sending
again with --id of that ID is safe: the saga applies it once.

--body-file - reads the body from standard input.
` + apiHelp,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return sendEvent(cmd, args, &o)
		},
	}
	o.api.register(cmd)
	f := cmd.Flags()
	f.StringVar(&o.event, "event", "", "the event's message type, as idem graph TYPE names it (required)")
	f.StringVar(&o.body, "body", "", "the event's body, a JSON document")
	f.StringVar(&o.bodyFile, "body-file", "", "read the body from this file (- for standard input)")
	f.StringVar(&o.id, "id", "", "the message ID (default: a new random one, printed, and named in the error when the answer is lost); resending with the same ID is safe")
	return cmd
}

func sendEvent(cmd *cobra.Command, args []string, o *sendOptions) error {
	if args[0] == "" {
		return usageErrorf("the saga type is empty: idem graph lists the types")
	}
	key, err := sagaKey(args[1])
	if err != nil {
		return err
	}
	if o.event == "" {
		return usageErrorf("--event is required: the message type to send (idem graph %s lists the saga's events)", clean(args[0]))
	}
	body, err := o.readBody(cmd.InOrStdin())
	if err != nil {
		return err
	}
	c, err := o.api.client()
	if err != nil {
		return err
	}
	id := o.id
	if id == "" {
		// Chosen here, not by the server: after a timeout or a 5xx the
		// message may have been sent, and only a resend under the same ID
		// is safe.
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	var acc admin.Accepted
	call := &apiCall{method: http.MethodPost, path: "/api/sagas/" + pathSegment(args[0]) + "/" + pathSegment(key) + "/events",
		body: admin.SendEvent{ID: id, Type: o.event, Body: body}}
	if err := c.do(cmd.Context(), call, &acc); err != nil {
		var ee *exitError
		if notSent(err) {
			return failed(fmt.Errorf("%w: the event was not sent (no connection was made): check --api, then send again", err))
		}
		if errors.As(err, &ee) && ee.code == 1 {
			return failed(fmt.Errorf("%w; it may have been sent: send again with --id %s, which is safe", err, id))
		}
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sent %s to saga %s/%q as message %s\n", clean(acc.Type), clean(args[0]), key, clean(acc.ID))
	return nil
}

// readBody returns the body --body or --body-file gives (exactly one),
// once it is JSON.
func (o *sendOptions) readBody(stdin io.Reader) (json.RawMessage, error) {
	var b []byte
	switch {
	case (o.body == "") == (o.bodyFile == ""):
		return nil, usageErrorf("give the event's body as --body JSON or --body-file F (one of them)")
	case o.bodyFile == "-":
		var err error
		if b, err = io.ReadAll(io.LimitReader(stdin, 16<<20)); err != nil {
			return nil, usageErrorf("--body-file -: read standard input: %v", err)
		}
	case o.bodyFile != "":
		var err error
		if b, err = os.ReadFile(o.bodyFile); err != nil {
			return nil, usageErrorf("--body-file: %v", err)
		}
	default:
		b = []byte(o.body)
	}
	if !json.Valid(b) {
		return nil, usageErrorf("the body is not JSON: give a JSON document such as {\"OrderID\": \"o-1\"}")
	}
	return b, nil
}
