// Command ingestor is the Ingestor import service on Idem: an upload and
// status API and a worker that imports delivery-advice files in chunks.
//
//	ingestor all     [flags]   API and worker in one process (the default)
//	ingestor api     [flags]   the HTTP API only
//	ingestor worker  [flags]   the worker only
//
// With no flags it keeps its state in ./ingestor-data/ingestor.db (SQLite,
// no server needed); --db postgres://... uses PostgreSQL instead. Idem's
// web console is served beside the API, under /console/. See README.md
// for curl commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/ingestor/ingest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	role := "all"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		role, args = args[0], args[1:]
	}
	if role != "all" && role != "api" && role != "worker" {
		fmt.Fprintf(stderr, "ingestor: unknown role %q: want all, api or worker\n", role)
		return 2
	}
	fs := flag.NewFlagSet("ingestor "+role, flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "ingestor-data/ingestor.db", "SQLite file, or a postgres:// URL")
	fs.StringVar(db, "store", "ingestor-data/ingestor.db", "alias of --db")
	addr := fs.String("addr", "127.0.0.1:8080", "API listen address")
	chunk := fs.Int("chunk-size", 500, "lines per chunk")
	depots := fs.String("depots", strings.Join(ingest.DefaultDepots, ","), "onboarded depot codes, comma-separated")
	maxFile := fs.Int("max-file-bytes", 16<<20, "largest file accepted")
	console := fs.Bool("console", true, "serve Idem's web console under /console/ beside the API")
	consoleToken := fs.String("console-token", os.Getenv("INGESTOR_CONSOLE_TOKEN"), "token the console and its API require (default $INGESTOR_CONSOLE_TOKEN); needed beyond loopback")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	q, err := ingest.OpenStore(ctx, *db, log)
	if err != nil {
		fmt.Fprintln(stderr, "ingestor:", err)
		return 1
	}
	defer q.Close()
	app, err := ingest.New(q, &ingest.Config{ChunkSize: *chunk, MaxFileBytes: *maxFile,
		Depots: ingest.NewDepots(strings.Split(*depots, ",")...), Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "ingestor:", err)
		return 1
	}
	if role != "api" {
		if err := app.Start(ctx); err != nil {
			fmt.Fprintln(stderr, "ingestor:", err)
			return 1
		}
		log.Info("worker started", "chunk_size", *chunk)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := app.Stop(sctx); err != nil {
				log.Error("worker stop", "error", err)
			}
		}()
	}
	if role == "worker" {
		<-ctx.Done()
		return 0
	}
	handler, err := serveMux(app, *addr, *console, *consoleToken)
	if err != nil {
		fmt.Fprintln(stderr, "ingestor:", err)
		return 2
	}
	srv := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("API listening", "addr", "http://"+*addr, "role", role)
	if *console {
		log.Info("console", "url", "http://"+*addr+ingest.ConsolePrefix+"/")
	}
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "ingestor:", err)
		return 1
	}
	return 0
}

// serveMux is the API, with the console under /console/ unless disabled.
// A console that replays and purges needs a token beyond the loopback
// interface.
func serveMux(app *ingest.App, addr string, console bool, token string) (http.Handler, error) {
	if !console {
		return app.Handler(), nil
	}
	if token == "" && !loopback(addr) {
		return nil, fmt.Errorf("--addr %s is beyond the loopback interface: set --console-token (or INGESTOR_CONSOLE_TOKEN), or --console=false", addr)
	}
	return app.ServeMux(&admin.Config{Token: token})
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
