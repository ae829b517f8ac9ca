package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// DeadLetterGroup is a group of dead letters that failed alike, as GET
// /api/dead-letters/groups returns it.
type DeadLetterGroup struct {
	// Fingerprint is "" for dead letters recorded before fingerprints:
	// select those with fingerprint=none.
	Fingerprint string `json:"fingerprint"`
	Reason      string `json:"reason"`
	// Pattern is the sample error's first line with IDs, numbers and
	// quoted values masked (store.MaskError): what the group's errors
	// share.
	Pattern     string    `json:"pattern"`
	SampleError string    `json:"sample_error"`
	Count       int       `json:"count"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
}

// DeadLetterGroups is the answer of GET /api/dead-letters/groups.
type DeadLetterGroups struct {
	Groups []DeadLetterGroup `json:"groups"`
}

// groupOf returns g as the API shows it.
func groupOf(g *readmodel.DeadLetterGroup) DeadLetterGroup {
	return DeadLetterGroup{
		Fingerprint: g.Fingerprint, Reason: g.Reason, Pattern: store.MaskError(g.SampleError), SampleError: g.SampleError,
		Count: g.Count, FirstSeen: g.FirstSeen.UTC(), LastSeen: g.LastSeen.UTC(),
	}
}

// triageProblem says what is wrong with the triage filters of q, or "".
func triageProblem(q url.Values) string {
	if _, err := readmodel.ParseArchivedFilter(q.Get("archived")); err != nil {
		return err.Error()
	}
	if _, err := store.ParseDeadLetterState(q.Get("state")); err != nil {
		return "state: " + err.Error()
	}
	if v := q.Get("archived_before"); v != "" {
		if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
			return fmt.Sprintf("archived_before %.40q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", v)
		}
	}
	return ""
}

// triageFilter reads fingerprint, archived and archived_before into f;
// triageProblem has checked them.
func triageFilter(q url.Values, f *inspect.DeadLetterFilter) *inspect.DeadLetterFilter {
	f.Fingerprint = q.Get("fingerprint")
	f.Archived, _ = readmodel.ParseArchivedFilter(q.Get("archived"))
	f.ArchivedBefore, _ = time.Parse(time.RFC3339Nano, q.Get("archived_before"))
	return f
}

func (s *api) apiDeadLetterGroups(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if p := triageProblem(q); p != "" {
		writeError(w, http.StatusBadRequest, "%s", p)
		return
	}
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	gs, err := inspect.Groups(ctx, s.st, deadLetterFilter(q), limit)
	if errors.Is(err, inspect.ErrUnsupported) {
		writeError(w, http.StatusNotImplemented, "this store does not group dead letters (readmodel.DeadLetterGrouper), or message_type was given and the store cannot select by it (readmodel.DeadLetterTypeQuerier)")
		return
	}
	if err != nil {
		s.internalError(w, r, "group dead letters", err)
		return
	}
	out := DeadLetterGroups{Groups: make([]DeadLetterGroup, 0, len(gs))}
	for i := range gs {
		out.Groups = append(out.Groups, groupOf(&gs[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// apiTriage serves POST /api/dead-letters/archive and /restore: the dead
// letters named by id (repeated), else every one the filters select as of
// as_of (restore selects among the archived), with dry_run. At most
// maxSelected IDs.
func (s *api) apiTriage(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if p := triageProblem(q); p != "" {
			writeError(w, http.StatusBadRequest, "%s", p)
			return
		}
		if len(q["id"]) > maxSelected {
			writeError(w, http.StatusBadRequest, "%d IDs: at most %d a request (as the console's selection); act on a filter, bound with as_of, instead", len(q["id"]), maxSelected)
			return
		}
		dry := q.Get("dry_run") == "true" || q.Get("dry_run") == "1"
		ctx, cancel := context.WithTimeout(r.Context(), 10*s.timeout)
		defer cancel()
		res, err := s.bulkTriage(ctx, &triageAction{Action: action, Filter: deadLetterFilter(q), IDs: q["id"], DryRun: dry})
		if errors.Is(err, inspect.ErrUnsupported) {
			writeError(w, http.StatusNotImplemented, "this store does not archive dead letters (readmodel.DeadLetterArchiver)")
			return
		}
		if err != nil && (res == nil || errors.Is(err, readmodel.ErrBadMark)) {
			s.internalError(w, r, action+" dead letters", err)
			return
		}
		if err != nil {
			s.bulkFailed(w, r, res, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// triageAction is one archive, restore, replay or purge of dead letters:
// those named by IDs, else those Filter selects as of Filter.AsOf (taken
// now when empty).
type triageAction struct {
	// Action is archive, restore, replay or purge.
	Action string
	Filter *inspect.DeadLetterFilter
	IDs    []string
	DryRun bool
}

// bulkTriage runs a. On error it returns, with the error, what it did
// until then (nil when it did not start).
func (s *parts) bulkTriage(ctx context.Context, a *triageAction) (*BulkResult, error) {
	if a.Action == "archive" || a.Action == "restore" {
		if _, err := inspect.Archiver(s.st); err != nil {
			return nil, err
		}
	}
	if len(a.IDs) > 0 {
		return s.triageIDs(ctx, a)
	}
	if a.Action == "replay" || a.Action == "purge" {
		return s.bulkDeadLetters(ctx, a.Filter, a.Action == "replay", a.DryRun)
	}
	f := a.Filter
	if a.Action == "restore" && f.ArchivedBefore.IsZero() {
		f.Archived = readmodel.ArchivedOnly
	}
	res := &BulkResult{DryRun: a.DryRun}
	if f.AsOf == "" {
		c, err := inspect.CountByReason(ctx, s.st, f)
		if err != nil {
			return nil, err
		}
		f.AsOf = c.AsOf
	}
	res.AsOf = f.AsOf
	err := inspect.EachDeadLetter(ctx, s.st, f, func(ds []store.DeadLetter) error {
		res.Matched += len(ds)
		if a.DryRun {
			return nil
		}
		var n int
		var err error
		if a.Action == "archive" {
			n, err = inspect.ArchiveDeadLetters(ctx, s.st, f, ds)
		} else {
			ids := make([]string, len(ds))
			for i := range ds {
				ids[i] = ds[i].ID
			}
			n, err = inspect.RestoreDeadLetters(ctx, s.st, ids, f.AsOf)
		}
		res.Done += n
		res.Skipped += len(ds) - n
		return err
	})
	res.Message = triageMessage(a.Action, res)
	return res, err
}

// triageIDs acts on the dead letters a names.
func (s *parts) triageIDs(ctx context.Context, a *triageAction) (*BulkResult, error) {
	ids := uniqueIDs(a.IDs)
	res := &BulkResult{DryRun: a.DryRun, Matched: len(ids), AsOf: a.Filter.AsOf}
	if a.DryRun {
		res.Message = triageMessage(a.Action, res)
		return res, nil
	}
	var err error
	switch a.Action {
	case "archive":
		var ar readmodel.DeadLetterArchiver
		if ar, err = inspect.Archiver(s.st); err == nil {
			res.Done, err = ar.ArchiveDeadLetters(ctx, &readmodel.ArchiveParams{IDs: ids, AsOf: a.Filter.AsOf})
		}
	case "restore":
		res.Done, err = inspect.RestoreDeadLetters(ctx, s.st, ids, a.Filter.AsOf)
	case "replay":
		for _, id := range ids {
			rerr := s.e.ReplayDeadLetter(ctx, id)
			switch {
			case errors.Is(rerr, store.ErrNotFound) || (rerr != nil && replayRefused(rerr) != ""):
			case rerr != nil:
				err = fmt.Errorf("replay dead letter %s: %w", id, rerr)
			default:
				res.Done++
			}
			if err != nil {
				break
			}
		}
	default:
		return nil, fmt.Errorf("dead letters: unknown action %q", a.Action)
	}
	res.Skipped = res.Matched - res.Done
	res.Message = triageMessage(a.Action, res)
	return res, err
}

// triageMessage says what an action did.
func triageMessage(action string, res *BulkResult) string {
	if action == "replay" || action == "purge" {
		return bulkMessage(res, action == "replay")
	}
	past := map[string]string{"archive": "archived", "restore": "restored"}[action]
	msg := fmt.Sprintf("%d dead letter(s) %s", res.Done, past)
	if res.DryRun {
		msg = fmt.Sprintf("%d dead letter(s) would be %s (dry run: nothing changed)", res.Matched, past)
	}
	if res.Skipped > 0 {
		msg += fmt.Sprintf(" (%d skipped: gone, already %s, or recorded again since the count)", res.Skipped, past)
	}
	return msg
}

// uniqueIDs returns ids without repeats or empty IDs, in their first
// order.
func uniqueIDs(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// replayActor is who a request replays dead letters as, recorded with
// each replay it begins (store.WithReplayBy): "api" for the API, else
// "console". A single admin token names no one further; a session's ID is
// a secret and is never recorded.
func replayActor(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		return "api"
	}
	return "console"
}
