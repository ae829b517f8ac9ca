// Package admin serves an Idem engine over HTTP: a web console, health and
// readiness probes, Prometheus metrics and a JSON admin API.
//
// Routes:
//
//	GET    /                                 the web console (see Console below and docs/console.md)
//	GET    /healthz                          200 while the process serves HTTP
//	GET    /readyz                           200 when the store answers and the engine runs, 503 otherwise
//	GET    /metrics                          Prometheus text format
//	GET    /api/overview                     rates, outbox backlog, timer lag, queue depth, instance counts
//	GET    /api/overview/series              the overview's charts: an hour of 10 s points (rates, commit latency p50/p99)
//	GET    /api/saga-types                   each machine's states (with counts), transitions and Validate problems
//	GET    /api/sagas?type=&state=&after=&limit=
//	GET    /api/sagas?status=&prefix=&stuck=true&type=&state=&after=&limit=   filtered
//	GET    /api/sagas?attr=name%3Dvalue&attr=...   by business attribute (repeatable, ANDed, NFC); combines with the filters above
//	GET    /api/sagas/{type}/{key}           one instance with its journal
//	POST   /api/sagas/{type}/{key}/events    {"type": T, "body": {...}}: send the saga an event (202); Idem-Actor names the caller
//	POST   /api/sagas/{type}/{key}/end       {"reason": R, "version": N}: end it (final state idem.ended, timers cancelled)
//	GET    /api/sagas/select?<filter>        count the active sagas a filter selects (the first 1,000; from=&to= on updated_at too), with the set's digest
//	POST   /api/sagas/end?<filter>           {"reason": R, "digest": D}: end the sagas counted, each at its version counted (skipped when it moved on; 409 for another filter's digest)
//	GET    /api/sagas/{type}/{key}/retries   its messages being retried: attempt, last error, next attempt (501 when the store keeps none)
//	POST   /api/sagas/{type}/{key}/retries/{id}/retry   publish the retrying message again now, same ID (409 when its retry keeps no envelope)
//	GET    /api/retries/select?saga_type=&message_type=   count the retrying messages a filter selects, with a digest
//	POST   /api/retries/retry?saga_type=&message_type=   {"digest": D}: retry them now (409 when the set changed)
//	GET    /api/sagas/{type}/{key}/history   its whole history: each journal entry's payload, headers, IDs, emitted messages (sent or not), diff, duration
//	GET    /api/dead-letters?type=&after=&limit=
//	GET    /api/dead-letters?reason=&message_type=&key=&type=&after=&limit=
//	GET    /api/dead-letters/counts?reason=&message_type=&key=&type=   counts by reason, and the count's as_of mark
//	GET    /api/dead-letters/{id}            with its history: first failure, replays and their outcomes
//	POST   /api/dead-letters/{id}/replay     re-queue the message (202; the outcome shows in its replays)
//	POST   /api/dead-letters/replay?reason=&message_type=&key=&type=&as_of=&dry_run=true   re-queue all matching as of the count
//	POST   /api/dead-letters/purge?reason=&message_type=&key=&type=&archived=&archived_before=&as_of=&dry_run=true    purge all matching as of the count (archived=exclude by default, as the counts)
//	DELETE /api/dead-letters/{id}            purge one dead letter, archived or not (only the console keeps purge to archived ones)
//	GET    /api/dead-letters/groups?reason=&message_type=&key=&type=&state=&archived=&limit=   failure groups by fingerprint: count, first and last seen, a sample error (message_type: 501 unless the store selects by it, readmodel.DeadLetterTypeQuerier)
//	POST   /api/dead-letters/archive?id=...  or ?reason=&fingerprint=&key=&type=&state=&as_of=&dry_run=true   archive (keep, out of the default lists); at most 500 id a request (400)
//	POST   /api/dead-letters/restore?id=...  or ?reason=&fingerprint=&...&as_of=&dry_run=true               restore archived dead letters
//	GET    /api/timers?type=&key=&overdue=true&after=&limit=   soonest due first
//	DELETE /api/timers/{type}/{key}/{name}   cancel a timer
//	POST   /api/timers/{type}/{key}/{name}/reschedule   {"in": "10m"} or {"due_at": "..."}
//	GET    /api/schedules?after=&limit=      recurring schedules by name (501 when the store keeps none)
//	POST   /api/schedules/{name}/pause       pause a schedule
//	POST   /api/schedules/{name}/resume      resume it (missed ticks follow its policy)
//	DELETE /api/schedules/{name}             delete it
//	POST   /api/schedules/{name}/fire?tick=  fire its next tick (tick: the next_due shown) now, under that tick's ID (202; 409 when it is not next)
//	GET    /api/limits?keys=                 flow-control limits: declared (declaration_stale when no running engine declared it for store.DeclarationStale), override, in force, in flight, waiting for admission, the busiest keys' counters, and a fair queue's shares with the most messages waiting (501 when the store keeps none)
//	POST   /api/limits/{name}                {"concurrency": N, "rate": R, "burst": B}: override it (a member left out takes the declared value; ?undeclared=true for a name no engine declares)
//	POST   /api/limits/{name}/reset          remove its override: the declared values are in force again
//	GET    /api/replicas?limit=              engine replicas from their heartbeats, with their state (501 when the store keeps none)
//	GET    /api/deploys                      per saga type: recorded definitions and the replicas that run each, live sagas by state, and the deploy check of this engine's machines (501 when the store neither counts its live sagas nor keeps definitions)
//	POST   /api/messages                     submit a message (202)
//
// Path values ({key}, {id}) are path-escaped by the client: a key with a
// slash is sent as %2F. A saga key or key prefix may be sent in any Unicode
// spelling: it is canonicalised as the engine does (NFC). The next of a full
// page of sagas or timers is an opaque base64url token, passed back as
// after= (a malformed one is a 400). Every JSON member is named in
// snake_case. Every error is a JSON object {"error": "..."} that
// says what is wrong and what to do. The filtered dead-letter routes also
// take fingerprint= (a group's; none for dead letters recorded before
// fingerprints) and archived= (exclude, the default; only; include); GET
// /api/dead-letters with no filter lists every dead letter, archived ones
// included (each with archived_at). Each replay records who began it
// ("api" or "console") in its by.
//
// # Security
//
// When Config.Token is set, /metrics and every /api/ call need the header
// "Authorization: Bearer <token>"; the token is compared in constant time.
// /healthz and /readyz stay open for probes and reveal nothing but up or
// down (the reason a store is unreachable goes to the log, not the
// response). Request bodies are limited to Config.MaxBodyBytes (413 above
// it). Neither the token nor the store's connection string appears in a
// response or a log line. Listening beyond the loopback interface without a
// token is the caller's decision; idem serve refuses it.
//
// # Console
//
// The console is server-rendered HTML (html/template, every asset
// embedded, htmx for polling and navigation) served by the same Server at
// /: overview, saga types drawn as SVG, instances with filters and a
// stuck view, each instance's journal, timers and dead letters, dead
// letters with single and bulk replay and purge, timers with cancel
// and reschedule, recurring schedules with pause and resume, flow-control
// limits with their use, changed and reset, the engine replicas with
// their heartbeats, and deploys: each saga type's definitions and the
// deploy check of this engine's machines against the store. Mount
// the Server at a prefix with http.StripPrefix: the console finds its
// prefix from the request.
//
// The console follows the API's rules (loopback Host without a token).
// With Config.Token set, a browser signs in once with the token and gets
// an HttpOnly, SameSite=Strict session cookie; the cookie is not accepted
// by /api/. Every POST, DELETE and PUT, of the console and the API alike,
// passes http.CrossOriginProtection: a browser request from another origin
// (by Sec-Fetch-Site, or Origin against Host) is refused with 403, so
// console forms carry no token of their own. Config.ReadOnly hides every mutating control and refuses every
// mutating request of the console and the API with 403. Pages carry a
// Content-Security-Policy that allows no inline script or style.
//
// # Submitting messages
//
// POST /api/messages takes {"id", "type", "body", "correlation_id",
// "idempotency_key", "headers"}. id, type and body are required; body is
// the message itself as JSON. A malformed request is refused with 400 and
// nothing is stored. A message whose type a registered saga consumes is
// decoded first, so a body that does not fit the type is refused with 400
// too. A message of a type no saga of this engine consumes is still
// accepted (202) and published: it may be consumed by a plain handler the
// API cannot see, and when nothing consumes it the engine records a dead
// letter with reason unknown_type, visible under /api/dead-letters. So
// nothing a client submitted is lost: it is refused with a reason, or
// stored. Submitting the same id (or idempotency_key) twice is accepted
// twice and applied once: the engine's inbox skips the duplicate, within
// the engine's retention. With "token": true the server first mints a dedup
// token for the message (idem.Engine.PublishWithTokens), and a copy that
// arrives after the message was applied is skipped however late; the
// header idem-token is refused otherwise (400).
//
// # Metrics
//
// Counters come from Engine.Stats at scrape time (idem_messages_total by
// result, idem_conflicts_total, idem_retries_total, ...); gauges read the
// store at scrape time (idem_outbox_backlog, idem_outbox_oldest_age_seconds,
// idem_timer_lag_seconds, idem_store_up); the histogram
// idem_unit_of_work_seconds is fed by an Observer whose Observe method is
// set as idem.Config.Observe before the engine is created.
package admin
