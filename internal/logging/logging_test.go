package logging

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

func TestFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Format
		err  string
	}{
		{nil, Text, ""},
		{[]string{"--log-format=json"}, JSON, ""},
		{[]string{"--log-format", "text"}, Text, ""},
		{[]string{"--log-format=yaml"}, "", `invalid argument "yaml" for "--log-format" flag: "yaml" is neither text nor json`},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f Format
		Register(fs, &f)
		err := fs.Parse(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || f != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.args, f, err, tc.want)
		}
	}
}

// In JSON every line is a JSON object, klog's (client-go's) included.
func TestJSONIncludesKlog(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, JSON, slog.LevelInfo)
	l.Info("from herald", "k", "v")
	klog.InfoS("from client-go", "resource", "services")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", buf.String())
	}
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("not JSON: %q: %v", line, err)
		}
	}
	if !strings.Contains(lines[1], `"msg":"from client-go"`) || !strings.Contains(lines[1], `"resource":"services"`) {
		t.Errorf("klog's line: %q", lines[1])
	}
}
