// Package logging is the --log-format flag every herald daemon takes, and
// the logger it selects; client-go's own log lines (klog) go through the
// same logger, so a JSON log is JSON throughout.
package logging

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// Format is how log records are written.
type Format string

// The formats.
const (
	Text Format = "text" // key=value pairs, slog's text handler
	JSON Format = "json" // one JSON object per line
)

// UnmarshalText accepts "text" or "json"; pflag names the flag in the
// error.
func (f *Format) UnmarshalText(b []byte) error {
	switch v := Format(b); v {
	case Text, JSON:
		*f = v
		return nil
	default:
		return fmt.Errorf("%q is neither text nor json", b)
	}
}

// MarshalText writes the format's name.
func (f Format) MarshalText() ([]byte, error) { return []byte(f), nil }

// Register adds --log-format to fs, stored in f (text by default).
func Register(fs *pflag.FlagSet, f *Format) {
	fs.TextVar(f, "log-format", Text, "log `format`: text (key=value pairs) or json (one object per line); client-go's messages are written the same way")
}

// New returns the logger for format and level writing to w, and makes
// klog (client-go's logging) write through it.
func New(w io.Writer, format Format, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if format == JSON {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	l := slog.New(h)
	klog.SetSlogLogger(l)
	return l
}
