// Package searchimport is the search-import saga of Idem's reference
// material: a user uploads a search (a set of reference files); the API
// announces the upload, storage announces (at least once, sometimes twice
// and concurrently) that the files are saved, the saga asks a parser to
// parse each file, and finishes when every file is parsed or one fails.
//
// The original system broke under duplicate storage notifications: two
// concurrent SearchUploadSaved created the saga twice (duplicate key) or
// sent the parse commands twice, and events in terminal states raised
// "not accepted in state" errors. On Idem the same machine is correct by
// construction: duplicates are recognised by message ID, concurrent
// creations are arbitrated by the store, commands leave only after the
// state that caused them is committed, and final states ignore late
// events.
//
// This is the saga that idem demo, idem serve and idem torture run: the
// idem binary imports this package, so what a user reads here is what
// they run. It imports only package saga.
package searchimport

import (
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/idemhq/idem/saga"
)

// SagaType is the saga type name under which instances are stored.
const SagaType = "searchimport"

// TimeoutName names the upload timer.
const TimeoutName = "upload-timeout"

// Search is the saga's state document.
type Search struct {
	SearchID       string    `json:"search_id"`
	ProjectID      string    `json:"project_id,omitempty"`
	SearchName     string    `json:"search_name,omitempty"`
	ReferenceFiles []string  `json:"reference_files,omitempty"`
	Parsed         []string  `json:"parsed,omitempty"`
	Error          string    `json:"error,omitempty"`
	StartedAt      time.Time `json:"started_at"`
	CompletedAt    time.Time `json:"completed_at,omitzero"`
}

// Metadata is what both upload events carry about the search.
type Metadata struct {
	SearchID       string   `json:"search_id"`
	ProjectID      string   `json:"project_id"`
	SearchName     string   `json:"search_name"`
	ReferenceFiles []string `json:"reference_files"`
}

// SearchUploadStarted is published by the API when a user starts an upload.
type SearchUploadStarted struct {
	Metadata
}

// SearchUploadSaved is published (at least once) when storage saved the
// files.
type SearchUploadSaved struct {
	Metadata
}

// ReferenceFileParsingCompleted is published by the parser for one file.
type ReferenceFileParsingCompleted struct {
	SearchID string `json:"search_id"`
	File     string `json:"file"`
}

// ReferenceFileFaulted is published by the parser when a file cannot be
// parsed.
type ReferenceFileFaulted struct {
	SearchID string `json:"search_id"`
	File     string `json:"file"`
	Error    string `json:"error"`
}

// StartParsingFaulted is published when the parse jobs could not start.
type StartParsingFaulted struct {
	SearchID string `json:"search_id"`
	Error    string `json:"error"`
}

// UploadTimeout fires when the files were not saved in time.
type UploadTimeout struct {
	SearchID string `json:"search_id"`
}

// StartParsingReferenceFile is the command the saga sends to the parser,
// once per file.
type StartParsingReferenceFile struct {
	SearchID string `json:"search_id"`
	File     string `json:"file"`
}

// errMissingMetadata explains a SearchUploadSaved without reference files.
var errMissingMetadata = errors.New("upload metadata has no reference files")

// Config tunes the machine. The zero value means the defaults.
type Config struct {
	// UploadTimeout is how long the saga waits in Uploading for the files.
	// Default 60 minutes.
	UploadTimeout time.Duration
}

// Machine is the search-import machine with its states, for tests and
// tools that need to name them.
type Machine struct {
	*saga.Machine[Search]
	Uploading, Uploaded, Parsing, Completed, Error saga.State
}

// New builds the search-import machine.
func New(cfg Config) *Machine {
	timeout := cfg.UploadTimeout
	if timeout == 0 {
		timeout = 60 * time.Minute
	}
	m := saga.New[Search](SagaType)
	x := &Machine{
		Machine:   m,
		Uploading: m.State("Uploading"),
		Uploaded:  m.State("Uploaded"),
		Parsing:   m.State("Parsing"),
		Completed: m.Final("Completed"),
		Error:     m.Final("Error"),
	}
	started := saga.NewEvent[SearchUploadStarted](m, func(e SearchUploadStarted) string { return e.SearchID })
	saved := saga.NewEvent[SearchUploadSaved](m, func(e SearchUploadSaved) string { return e.SearchID })
	parsed := saga.NewEvent[ReferenceFileParsingCompleted](m, func(e ReferenceFileParsingCompleted) string { return e.SearchID })
	fileFaulted := saga.NewEvent[ReferenceFileFaulted](m, func(e ReferenceFileFaulted) string { return e.SearchID })
	startFaulted := saga.NewEvent[StartParsingFaulted](m, func(e StartParsingFaulted) string { return e.SearchID })
	timedOut := saga.NewEvent[UploadTimeout](m, func(e UploadTimeout) string { return e.SearchID })

	// SearchUploadSaved carries the metadata the parse needs: without
	// reference files the saga cannot proceed (fatal).
	acceptSaved := func(b *saga.Activity[Search, SearchUploadSaved]) *saga.Activity[Search, SearchUploadSaved] {
		return b.IfElse(func(_ *saga.Context[Search], e SearchUploadSaved) bool { return len(e.ReferenceFiles) > 0 },
			func(b *saga.Activity[Search, SearchUploadSaved]) *saga.Activity[Search, SearchUploadSaved] {
				return b.Then(func(c *saga.Context[Search], e SearchUploadSaved) error {
					c.Unschedule(TimeoutName)
					record(c, e.Metadata)
					c.Data.ReferenceFiles = slices.Clone(e.ReferenceFiles) // storage is the authority
					for _, f := range c.Data.ReferenceFiles {
						c.Send(StartParsingReferenceFile{SearchID: c.Data.SearchID, File: f})
					}
					return nil
				}).TransitionTo(x.Uploaded)
			},
			func(b *saga.Activity[Search, SearchUploadSaved]) *saga.Activity[Search, SearchUploadSaved] {
				return b.Then(func(c *saga.Context[Search], e SearchUploadSaved) error {
					c.Unschedule(TimeoutName)
					record(c, e.Metadata)
					fail(c, errMissingMetadata.Error())
					return nil
				}).TransitionTo(x.Error)
			})
	}
	// A late SearchUploadStarted is only informative: missing metadata is
	// logged, never fatal, because SearchUploadSaved already brought it.
	lateStarted := saga.When(started).Then(func(c *saga.Context[Search], e SearchUploadStarted) error {
		if len(e.ReferenceFiles) == 0 {
			c.Log(slog.LevelWarn, "late SearchUploadStarted without metadata", "search_id", e.SearchID)
			return nil
		}
		record(c, e.Metadata)
		return nil
	})
	fileDone := func(b *saga.Activity[Search, ReferenceFileParsingCompleted]) *saga.Activity[Search, ReferenceFileParsingCompleted] {
		return b.Then(func(c *saga.Context[Search], e ReferenceFileParsingCompleted) error {
			if !slices.Contains(c.Data.Parsed, e.File) {
				c.Data.Parsed = append(c.Data.Parsed, e.File)
			}
			return nil
		}).IfElse(allParsed,
			func(b *saga.Activity[Search, ReferenceFileParsingCompleted]) *saga.Activity[Search, ReferenceFileParsingCompleted] {
				return b.Then(func(c *saga.Context[Search], _ ReferenceFileParsingCompleted) error {
					c.Data.CompletedAt = c.Now()
					return nil
				}).TransitionTo(x.Completed)
			},
			func(b *saga.Activity[Search, ReferenceFileParsingCompleted]) *saga.Activity[Search, ReferenceFileParsingCompleted] {
				return b.TransitionTo(x.Parsing)
			})
	}
	faultFile := saga.When(fileFaulted).Then(func(c *saga.Context[Search], e ReferenceFileFaulted) error {
		fail(c, "parse "+e.File+": "+e.Error)
		return nil
	}).TransitionTo(x.Error)
	faultStart := saga.When(startFaulted).Then(func(c *saga.Context[Search], e StartParsingFaulted) error {
		fail(c, "start parsing: "+e.Error)
		return nil
	}).TransitionTo(x.Error)

	m.Initially(
		saga.When(started).Then(func(c *saga.Context[Search], e SearchUploadStarted) error {
			record(c, e.Metadata)
			c.Schedule(TimeoutName, timeout, UploadTimeout{SearchID: e.SearchID})
			return nil
		}).TransitionTo(x.Uploading),
		acceptSaved(saga.When(saved).Then(start)),
	)
	m.During(x.Uploading,
		lateStarted,
		acceptSaved(saga.When(saved)),
		saga.When(timedOut).Then(func(c *saga.Context[Search], _ UploadTimeout) error {
			fail(c, "upload not saved in time")
			return nil
		}).TransitionTo(x.Error),
		saga.Ignore(parsed), saga.Ignore(fileFaulted), saga.Ignore(startFaulted),
	)
	for _, s := range []saga.State{x.Uploaded, x.Parsing} {
		m.During(s,
			lateStarted,
			saga.Ignore(saved),
			fileDone(saga.When(parsed)),
			faultFile, faultStart,
			saga.Ignore(timedOut),
		)
	}
	for _, s := range []saga.State{x.Completed, x.Error} {
		m.During(s,
			saga.Ignore(started), saga.Ignore(saved), saga.Ignore(parsed),
			saga.Ignore(fileFaulted), saga.Ignore(startFaulted), saga.Ignore(timedOut),
		)
	}
	return x
}

func start(c *saga.Context[Search], e SearchUploadSaved) error {
	c.Data.StartedAt = c.Now()
	return nil
}

func record(c *saga.Context[Search], md Metadata) {
	d := c.Data
	if d.StartedAt.IsZero() {
		d.StartedAt = c.Now()
	}
	d.SearchID = md.SearchID
	if md.ProjectID != "" {
		d.ProjectID = md.ProjectID
	}
	if md.SearchName != "" {
		d.SearchName = md.SearchName
	}
	if len(md.ReferenceFiles) > 0 && len(d.ReferenceFiles) == 0 {
		d.ReferenceFiles = slices.Clone(md.ReferenceFiles)
	}
}

func fail(c *saga.Context[Search], msg string) {
	c.Data.Error = msg
	c.Data.CompletedAt = c.Now()
}

func allParsed(c *saga.Context[Search], _ ReferenceFileParsingCompleted) bool {
	for _, f := range c.Data.ReferenceFiles {
		if !slices.Contains(c.Data.Parsed, f) {
			return false
		}
	}
	return true
}
