package testenv

import (
	"context"
	"embed"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// WriteConfig writes yaml as the config file driftguard.yaml in dir (a
// fresh folder when dir is "") and returns its path.
func WriteConfig(t testing.TB, dir, yaml string) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	return WriteFile(t, dir, "driftguard.yaml", yaml)
}

// WriteFile writes content to name in dir, creating the folders name
// names, and returns its path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// WaitFor polls cond every 50ms until it holds, and fails the test naming
// what it waited for when ctx ends first.
func WaitFor(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if !Poll(ctx, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Poll calls cond every 50ms until it holds, and reports whether it held
// before ctx ended. It serves a wait whose failure the test reports in its
// own words, with what it saw last, and one the test goes on from to check
// more.
func Poll(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

//go:embed fixtures/custom-streams
var fixtures embed.FS

// CustomStreams writes a configuration whose streams exist only in it,
// with their schemas beside it, into a fresh folder and returns the config
// file's path: tickets (the assign policy in names other than chat's:
// comments on support tickets, with agents as members) and subscriptions
// (the latest policy with a terminal state).
func CustomStreams(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := fixtures.ReadDir("fixtures/custom-streams")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := fixtures.ReadFile("fixtures/custom-streams/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		WriteFile(t, dir, e.Name(), string(data))
	}
	return filepath.Join(dir, "driftguard.yaml")
}
