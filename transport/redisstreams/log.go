package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SlogLogger is a go-redis logger that turns each of go-redis's own log
// lines (a failed dial during an outage, a connection closed with unread
// data) into one slog record: the line as the message, with the attribute
// component=go-redis. Without it go-redis prints those lines unstructured
// to stderr, past the application's handler. Pass it to redis.SetLogger,
// or call LogTo.
//
// The zero value logs to slog.Default() at LevelInfo. It is safe for
// concurrent use (as far as Logger is).
type SlogLogger struct {
	// Logger receives the records. Nil means slog.Default(), read at each
	// line.
	Logger *slog.Logger
	// Level is the level of every record: go-redis does not say how grave
	// a line is. Default slog.LevelInfo (the zero value).
	Level slog.Level
}

// ComponentGoRedis is the value of the "component" attribute of the
// records SlogLogger writes.
const ComponentGoRedis = "go-redis"

// Printf writes the formatted line as one record, without its trailing
// newline. It implements go-redis's logging interface.
func (s SlogLogger) Printf(ctx context.Context, format string, v ...any) {
	l := s.Logger
	if l == nil {
		l = slog.Default()
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if !l.Enabled(ctx, s.Level) {
		return
	}
	msg := strings.TrimRight(fmt.Sprintf(format, v...), "\r\n")
	l.Log(ctx, s.Level, msg, slog.String("component", ComponentGoRedis))
}

// LogTo routes go-redis's own log lines to l (nil means slog.Default()) at
// LevelInfo, as SlogLogger describes. Call it once, early in main.
//
// go-redis's logger is global to the process (redis.SetLogger): LogTo
// changes it for every go-redis client of the program, those of other
// packages and transports included, and the last call wins. A library
// should leave that choice to its program.
func LogTo(l *slog.Logger) {
	redis.SetLogger(SlogLogger{Logger: l})
}
