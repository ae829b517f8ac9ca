package ingest

import (
	"net/http"

	"github.com/idemhq/idem/admin"
)

// ConsolePrefix is where ServeMux mounts Idem's web console.
const ConsolePrefix = "/console"

// ServeMux returns the app's API (Handler) with Idem's web console, the
// import pipeline's operations dashboard, mounted under ConsolePrefix:
// jobs by status (the ingestor.job instances and their counts by state),
// each chunk's result (the ingestor.chunk instances, Imported or Failed),
// each saga's journal, and the dead letters (messages the engine could not
// apply) with replay and purge. console configures it (nil means no token
// and read-write: serve it on the loopback interface only). Requeueing a
// job's failed chunks stays POST /imports/{id}/requeue: it is a business
// action, not a redelivery.
func (a *App) ServeMux(console *admin.Config) (*http.ServeMux, error) {
	var c admin.Config
	if console != nil {
		c = *console
	}
	if c.Logger == nil {
		c.Logger = a.log
	}
	srv, err := admin.New(a.eng, a.st, &c)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", a.Handler())
	mux.Handle(ConsolePrefix+"/", http.StripPrefix(ConsolePrefix, srv))
	return mux, nil
}
