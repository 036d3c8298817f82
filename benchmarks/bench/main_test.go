package main

import "testing"

// A results file names the flags it was produced with, quoted where a
// shell would need them.
func TestCommandNamesTheFlags(t *testing.T) {
	if got := command(nil); got != "go tool task bench" {
		t.Errorf("no flags: %q", got)
	}
	got := command([]string{"--contenders", "driftguard all", "--rate", "200"})
	if want := `go tool task bench -- --contenders "driftguard all" --rate 200`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
