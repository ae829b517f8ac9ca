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
// One business flow is one trace: a message's span is the child of the
// send span that produced it, wherever that ran, so the trace goes from
// the caller (or an HTTP request to the admin API) through every saga and
// handler the flow reaches. docs/observability.md draws it and explains
// the choice.
//
//   - "POST /api/messages" (server): the admin API's submission of a
//     message, a child of the request's W3C traceparent (StartRequest).
//   - "idem.send <type>" (producer): one envelope sent by Engine.Publish
//     (a child of the caller's span) or emitted by a transition (a child
//     of the message span, started when the transition is applied and
//     ended with the commit that stores it). Its context is the
//     envelope's traceparent header, stored with the outbox row, so the
//     relay re-sends the same context. An envelope that carries a
//     traceparent of its own keeps it, and the span links to it.
//     Attributes: messaging.system, messaging.operation.name and
//     messaging.operation.type ("send"), messaging.destination.name,
//     messaging.message.id, messaging.message.conversation_id,
//     idem.message.type, idem.saga.type and idem.saga.key (of the emitting
//     saga), error.type on failure.
//   - "idem.unit_of_work" (internal): one lane's unit of work, from its
//     first attempt to its commit (or failure), across the conflicts that
//     re-apply it. It links to the send span of each of its messages.
//     Attributes: idem.saga.type (when every message has the same one),
//     messaging.batch.message_count and idem.uow.messages,
//     idem.uow.attempts, idem.uow.conflicts, idem.uow.outcome (committed,
//     split, failed, lease_lost, stopped), messaging.system,
//     messaging.destination.name, messaging.consumer.group.name. A unit of
//     work that is split after a conflict or a failure holds the smaller
//     units of work as children. Status Error unless committed or split.
//   - "idem.message <type>" (consumer): one message in one attempt, from
//     the inbox check to the commit, the child of the message's send span
//     (parsed from the envelope's traceparent header). It links to the
//     send span (link attribute idem.link = "producer") and to its unit of
//     work (idem.link = "unit_of_work"); without a valid traceparent it is
//     the unit of work's child. Attributes: messaging.system (the
//     transport, from transport.Describer; "idem" when it does not
//     describe itself), messaging.operation.name and
//     messaging.operation.type ("process"), messaging.destination.name,
//     messaging.consumer.group.name, messaging.message.id (the envelope
//     ID), messaging.message.conversation_id (the correlation ID, when
//     set), idem.message.type, idem.message.dedup_id, idem.saga.type,
//     idem.saga.key, idem.delivery.attempt, idem.outcome (applied,
//     duplicate, ignored, not_found, dead_lettered, retried, conflict,
//     failed), idem.state.from and idem.state.to (applied transitions),
//     idem.dead_letter.reason (dead letters), error.type (the dead-letter
//     reason, or retried, conflict, failed). An attempt rolled back by a
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
