// Package otelidem traces an idem.Engine with OpenTelemetry. It is a leaf:
// the idem package and the stores import nothing of OpenTelemetry, and a
// program that does not import otelidem compiles none of it.
//
// Set the tracer in the engine's Config, and wrap the log handler so that
// log lines written while a span is open carry its trace_id and span_id:
//
//	logger := slog.New(otelidem.NewLogHandler(slog.NewJSONHandler(os.Stderr, nil)))
//	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: logger, Tracer: otelidem.NewTracer()})
//
// # Spans
//
// The tracer's instrumentation scope is "github.com/idemhq/idem/otelidem".
//
//   - "idem.unit_of_work" (internal): one lane's unit of work, from its
//     first attempt to its commit (or failure), across the conflicts that
//     re-apply it. Attributes: idem.saga.type (when every message has the
//     same one), idem.uow.messages, idem.uow.attempts, idem.uow.conflicts,
//     idem.uow.outcome (committed, split, failed, lease_lost, stopped). A
//     unit of work that is split after a conflict or a failure holds the
//     smaller units of work as children. Status Error unless committed or
//     split.
//   - "idem.message <type>" (consumer), a child of its unit of work: one
//     message in one attempt, from the inbox check to the commit. It
//     links to the producer's span, parsed from the envelope's
//     traceparent header (link attribute idem.link = "producer"), and the
//     messages and timers it emits carry its own trace context.
//     Attributes: messaging.system ("idem"), messaging.operation.type
//     ("process"), messaging.message.id (the envelope ID),
//     messaging.message.conversation_id (the correlation ID, when set),
//     idem.message.type, idem.message.dedup_id, idem.saga.type,
//     idem.saga.key, idem.delivery.attempt, idem.outcome (applied,
//     duplicate, ignored, not_found, dead_lettered, retried, conflict,
//     failed), idem.state.from and idem.state.to (applied transitions),
//     idem.dead_letter.reason (dead letters). An attempt rolled back by a
//     conflict ends with idem.outcome = conflict, so a message has at
//     most one span whose outcome is applied. Status Error for
//     dead_lettered and failed.
//   - "idem.background <task>" (internal): a relay, timers, sweep or
//     replay_dead_letter pass. Attributes: idem.task, idem.items (rows
//     handled). A pass that handled nothing and failed nothing records no
//     span, so that idle relay and timer polls do not flood the traces;
//     because the span is then created when the pass ends, the store calls
//     of a pass are not its children.
package otelidem
