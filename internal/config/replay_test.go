package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

const replaySecret = "whsec_cmVwbGF5LWNvbmZpZy1zZWNyZXQtb2YtMzItYnl0ZXM="

// replay.url with the secret from DRIFTGUARD_REPLAY_SECRET_<STREAM>, the
// documented defaults, and the secret redacted in `driftguard config`.
func TestReplaySecretFromTheEnvironment(t *testing.T) {
	path := testenv.WriteConfig(t, "", `
streams:
  workflow:
    replay: {url: "https://publisher.example/replays"}
`)
	cfg := mustLoad(t, path, []string{"DRIFTGUARD_REPLAY_SECRET_WORKFLOW=" + replaySecret})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := cfg.Streams["workflow"].Replay
	if secret, err := r.SigningSecret(); err != nil || secret != replaySecret {
		t.Errorf("signing secret %q (%v), want the variable's", secret, err)
	}
	if r.Timeout != 10*time.Second || r.MinBackoff != time.Second || r.MaxBackoff != time.Minute || r.GiveUpAfter != time.Hour || r.ResendAfter != 30*time.Minute || r.Concurrency != 16 {
		t.Errorf("defaults %+v", r)
	}
	out, err := cfg.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), replaySecret) || !strings.Contains(string(out), `secret: "[redacted]" # from DRIFTGUARD_REPLAY_SECRET_WORKFLOW`) {
		t.Errorf("the effective configuration does not redact the replay secret:\n%s", out)
	}
}

// The secret from a file, trimmed.
func TestReplaySecretFromAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(replaySecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := testenv.WriteConfig(t, "", `
streams:
  workflow:
    replay: {url: "http://127.0.0.1:9/replays", secret_file: `+file+`}
`)
	cfg := mustLoad(t, path, nil)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if secret, err := cfg.Streams["workflow"].Replay.SigningSecret(); err != nil || secret != replaySecret {
		t.Errorf("signing secret %q (%v), want the file's", secret, err)
	}
}

// Each mistake is named by its path.
func TestReplayValidation(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"no secret", `workflow: {replay: {url: "https://p.example/r"}}`, "in streams.workflow.replay.secret: is required with replay.url"},
		{"not gapless", `presence: {replay: {url: "https://p.example/r", secret: ` + replaySecret + `}}`, "in streams.presence.replay.url: only the gapless policy"},
		{"not a URL", `workflow: {replay: {url: "p.example/r", secret: ` + replaySecret + `}}`, "in streams.workflow.replay.url: \"p.example/r\" is not an http or https URL"},
		{"bad secret", `workflow: {replay: {url: "https://p.example/r", secret: nope}}`, "in streams.workflow.replay.secret: a standard-webhooks secret starts with whsec_"},
		{"back-off", `workflow: {replay: {url: "https://p.example/r", secret: ` + replaySecret + `, min_backoff: 2m}}`, "in streams.workflow.replay.max_backoff: 1m0s is below replay.min_backoff"},
		{"resend", `workflow: {replay: {url: "https://p.example/r", secret: ` + replaySecret + `, resend_after: -1s}}`, "in streams.workflow.replay.resend_after: must be positive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Load(testenv.WriteConfig(t, "", "streams:\n  "+c.yaml+"\n"), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v, want %q", err, c.want)
			}
		})
	}
}
