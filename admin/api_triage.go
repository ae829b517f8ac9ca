package admin

import (
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
