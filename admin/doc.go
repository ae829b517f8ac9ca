// Package admin serves an Idem engine over HTTP: health and readiness
// probes, Prometheus metrics and a JSON admin API.
//
// Routes:
//
//	GET    /healthz                          200 while the process serves HTTP
//	GET    /readyz                           200 when the store answers and the engine runs, 503 otherwise
//	GET    /metrics                          Prometheus text format
//	GET    /api/sagas?type=&state=&after=&limit=
//	GET    /api/sagas/{type}/{key}           one instance with its journal
//	GET    /api/dead-letters?type=&after=&limit=
//	GET    /api/dead-letters/{id}
//	POST   /api/dead-letters/{id}/replay     publish the message again (202)
//	DELETE /api/dead-letters/{id}            purge one dead letter
//	POST   /api/messages                     submit a message (202)
//
// Path values ({key}, {id}) are path-escaped by the client: a key with a
// slash is sent as %2F. Every error is a JSON object {"error": "..."} that
// says what is wrong and what to do.
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
// twice and applied once: the engine's inbox skips the duplicate.
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
