package idem

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// Start's checks run in this order: each later one relies on what the
// earlier ones found (the limits clear the claim the probe allowed).
func TestStartChecksOrder(t *testing.T) {
	var got []string
	for _, c := range startChecks() {
		got = append(got, c.name)
	}
	want := []string{"registry", "pool", "unit of work", "limits", "deploy", "schedules", "definitions"}
	if !slices.Equal(got, want) {
		t.Errorf("start-up checks: got %q, want %q", got, want)
	}
}

// The checks run in order; a warning is logged with the check's name and
// message; the first refusal stops the run, and its error names the check
// and keeps the refusal's text and chain.
func TestRunStartChecksStopsAtRefusal(t *testing.T) {
	var logs bytes.Buffer
	b := &base{log: slog.New(slog.NewTextHandler(&logs, nil))}
	var ran []string
	cause := errors.New("idem: start: the widget is off: turn it on")
	check := func(name string, r checkResult) startCheck {
		return startCheck{name, func(context.Context, *startup) checkResult { ran = append(ran, name); return r }}
	}
	checks := []startCheck{
		check("first", passed()),
		check("second", warned("the gadget is slow: oil it")),
		check("third", refused(cause)),
		check("fourth", passed()),
	}
	err := runStartChecks(t.Context(), checks, &startup{base: b})
	if want := []string{"first", "second", "third"}; !slices.Equal(ran, want) {
		t.Errorf("checks run: got %q, want %q (none after the refusal)", ran, want)
	}
	var sce *StartCheckError
	if !errors.As(err, &sce) || sce.Check != "third" {
		t.Fatalf("got error %v, want a *StartCheckError of check third", err)
	}
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), cause.Error()) || !strings.Contains(err.Error(), `start-up check "third"`) {
		t.Errorf("error %q: want it to wrap %q and name the check", err, cause)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "check=second") || !strings.Contains(l, "the gadget is slow: oil it") {
		t.Errorf("log %q: want a warning naming check second with its message", l)
	}
}

// A refusing check stops Start naming itself, and the checks after it do
// not run: a pool too small refuses before the schedules are saved.
func TestStartRefusalNamesCheckAndStops(t *testing.T) {
	ctx := t.Context()
	st := sizedStore{memstore.New(nil), 2}
	e, err := NewEngine(st, memtransport.New(nil), &Config{Lanes: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var sce *StartCheckError
	if err := e.Start(ctx); !errors.As(err, &sce) || sce.Check != "registry" || !strings.Contains(err.Error(), "nothing registered") {
		t.Fatalf("Start with nothing registered: got %v, want a refusal of check registry", err)
	}
	if err := e.Every("tick", 1000000000, struct{ N int }{1}); err != nil {
		t.Fatal(err)
	}
	err = e.Start(ctx)
	if !errors.As(err, &sce) || sce.Check != "pool" || !strings.Contains(err.Error(), "raise the pool's size") {
		t.Fatalf("Start with a pool of 2: got %v, want a refusal of check pool saying what to change", err)
	}
	if got, err := st.ListSchedules(ctx, &store.ListParams{}); err != nil || len(got) != 0 {
		t.Errorf("schedules after the refusal: got %d, %v; want none saved (the schedules check runs after pool)", len(got), err)
	}
	if err := e.Ready(); err == nil {
		t.Error("Ready after a refused Start: got nil, want not started")
	}
}
