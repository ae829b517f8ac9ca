package saga

import (
	"context"
	"log/slog"
	"time"
)

// Intent distinguishes commands (Send) from events (Publish). Transports
// route both the same way; the intent travels as a header.
type Intent string

// Intents of emitted messages.
const (
	IntentSend    Intent = "send"
	IntentPublish Intent = "publish"
)

// Emission is a message a handler emitted. The engine stores it in the
// outbox in the same commit as the state change and gives it an ID derived
// from the incoming message, the saga and Index.
type Emission struct {
	Intent Intent
	// Type is the message type name (see MessageType).
	Type string
	// Msg is the message value, encoded by the engine.
	Msg any
	// Index is the emission's position among everything the message emitted
	// (sends, publishes and schedules), which makes its ID deterministic.
	Index int
	// RequestTimer, for a request sent with Request.Send, names the
	// request's timeout timer, and RequestTimerIndex is that timer's Index
	// (its Scheduled.Index): the engine gives the emission the ID
	// RequestID(that timer's envelope ID) instead of one derived from
	// Index.
	RequestTimer      string
	RequestTimerIndex int
}

// Scheduled is a timer a handler scheduled: Msg is delivered to the
// transport at DueAt unless Unschedule(Name) runs first. Scheduling a name
// again replaces the earlier timer.
type Scheduled struct {
	Name  string
	DueAt time.Time
	Type  string
	Msg   any
	Index int
}

// LogRecord is a log line a handler buffered with Context.Log; the engine
// writes it with the saga's attributes.
type LogRecord struct {
	Level slog.Level
	Msg   string
	Args  []any
}

// Context is what a handler sees: the saga's state document, the incoming
// message's identity, and the buffered effects. Handlers must not perform
// I/O: everything they emit is buffered and committed with the state. A
// Context is used by one goroutine and is valid only during the handler.
type Context[S any] struct {
	// Data is the saga's state document; mutate it in place.
	Data *S

	key, messageID string
	now            time.Time
	current, next  State
	index          int
	emitted        []Emission
	scheduled      []Scheduled
	unscheduled    []string
	logs           []LogRecord
	tx             any             // see Tx
	ctx            context.Context // see Context
	timers         map[string]string
}

// Key returns the canonical saga key.
func (c *Context[S]) Key() string { return c.key }

// MessageID returns the deduplication ID of the message being applied.
func (c *Context[S]) MessageID() string { return c.messageID }

// Now returns the engine's clock reading for this message. Use it instead
// of time.Now so that transitions stay deterministic.
func (c *Context[S]) Now() time.Time { return c.now }

// Current returns the state the saga was in when the message arrived
// (Initial for a new saga).
func (c *Context[S]) Current() State { return c.current }

// Send buffers a command.
func (c *Context[S]) Send(msg any) { c.emit(IntentSend, msg) }

// Publish buffers an event.
func (c *Context[S]) Publish(msg any) { c.emit(IntentPublish, msg) }

func (c *Context[S]) emit(intent Intent, msg any) {
	c.emitted = append(c.emitted, Emission{Intent: intent, Type: MessageType(msg), Msg: msg, Index: c.index})
	c.index++
}

// Schedule buffers a timer named name that delivers msg after delay. A
// timer that fires after the saga moved on and unscheduled it is dropped by
// the engine; one that was not unscheduled is an ordinary event and the
// machine must handle or ignore it in whatever state the saga is then.
func (c *Context[S]) Schedule(name string, delay time.Duration, msg any) {
	c.scheduled = append(c.scheduled, Scheduled{Name: name, DueAt: c.now.Add(delay), Type: MessageType(msg), Msg: msg, Index: c.index})
	c.index++
}

// Unschedule cancels the timer named name, if any.
func (c *Context[S]) Unschedule(name string) {
	for i := 0; i < len(c.scheduled); i++ {
		if c.scheduled[i].Name == name {
			c.scheduled = append(c.scheduled[:i], c.scheduled[i+1:]...)
			i--
		}
	}
	c.unscheduled = append(c.unscheduled, name)
}

// Log buffers a log line; the engine writes it with the saga type, key and
// message ID once the message is applied.
func (c *Context[S]) Log(level slog.Level, msg string, args ...any) {
	c.logs = append(c.logs, LogRecord{Level: level, Msg: msg, Args: args})
}
