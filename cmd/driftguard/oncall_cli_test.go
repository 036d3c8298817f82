package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"24h":                  now.Add(-24 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"2026-12-01T08:30:00Z": time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "-5h", "2026-12-01"} {
		if _, err := parseSince(in, now); err == nil || !strings.Contains(err.Error(), "--since") {
			t.Errorf("parseSince(%q): %v, want an error naming --since", in, err)
		}
	}
}

// parseSince never panics, and what it accepts is never after now.
func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"", "24h", "1ns", "2026-12-01T08:30:00Z", "2026-12-01T08:30:00+02:00", "-1h", "x"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, in string) {
		got, err := parseSince(in, now)
		if err == nil && got.After(now) && !strings.Contains(in, "T") {
			t.Errorf("parseSince(%q) = %v, after now", in, got)
		}
	})
}

// inspect and explain take their stream and key or event id as operands,
// before or among their flags; a missing one is a usage error.
func TestOncallCommandsTakeOperands(t *testing.T) {
	isolateEnv(t)
	for _, tc := range []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"inspect", "orders"}, "2 arguments needed, 1 given"},
		{[]string{"explain"}, "2 arguments needed, 0 given"},
		{[]string{"inspect", "orders", "k", "extra"}, `unexpected argument "extra"`},
		{[]string{"inspect", "nope", "k", "--json"}, `unknown stream "nope"`},
		{[]string{"explain", "orders", "e", "--from", "elsewhere"}, `--from "elsewhere"`},
		{[]string{"redrive"}, "--stream is required"},
		{[]string{"redrive", "--stream", "orders", "--since", "soon"}, "--since"},
		{[]string{"redrive", "--stream", "orders", "--reason", "orphan_ttl,relased"}, `--reason "relased"`},
	} {
		r := runCLI(t, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.wantStderr) {
			t.Errorf("%q: want exit 2 and stderr with %q; got %v", tc.args, tc.wantStderr, r)
		}
	}
}
