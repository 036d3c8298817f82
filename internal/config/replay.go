package config

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"
)

// Replay is where `driftguard relay` sends a gapless stream's replay
// requests: each record of `<stream>.replay` is POSTed to URL as a
// Standard Webhooks delivery signed with the secret, so that a publisher
// that only speaks HTTP learns of the gap. Without a URL the requests stay
// in the topic for a publisher that reads Kafka.
type Replay struct {
	// URL receives the requests; empty (the default) sends none.
	URL string `yaml:"url"`
	// Secret signs the requests, a Standard Webhooks secret (whsec_ and
	// base64) the publisher verifies with. Set it with
	// DRIFTGUARD_REPLAY_SECRET_<STREAM>, or put it in SecretFile, rather
	// than in the file.
	Secret string `yaml:"secret" redact:"true"`
	// SecretFile holds the secret (a mounted Kubernetes Secret), read when
	// the relay starts; Secret wins when both are set.
	SecretFile string `yaml:"secret_file"`
	// Timeout bounds one POST, answer included. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// MinBackoff and MaxBackoff bound the wait before a retry after a
	// 5xx, a 429 or a POST without an answer: it doubles from MinBackoff
	// up to MaxBackoff, each wait drawn between half and all of it so that
	// relays do not retry in step. Defaults 1s and 1m.
	MinBackoff time.Duration `yaml:"min_backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// GiveUpAfter is how long a request is retried before it goes to
	// `<stream>.dlq` (reason replay_undeliverable). Default 1h; the
	// processor asks again every limits.gap_timeout while the gap stays
	// open, so a publisher that comes back later still hears of it.
	GiveUpAfter time.Duration `yaml:"give_up_after"`
	// ResendAfter is how long a gap the publisher accepted (2xx) is not
	// asked for again: the processor's requests for the same gap within
	// it are recorded duplicate, and those for an earlier gap of the key
	// superseded, without a POST. After it the next request is sent, so
	// that a publisher that accepted but never sent hears again. Default
	// 30m.
	ResendAfter time.Duration `yaml:"resend_after"`
	// Concurrency is how many keys' requests one relay sends at once
	// (each key's one at a time). Default 16.
	Concurrency int `yaml:"concurrency"`
}

// Enabled reports whether the stream's replay requests are sent.
func (r Replay) Enabled() bool { return r.URL != "" }

// replaySecretPrefix starts the variable that sets a stream's
// replay.secret: DRIFTGUARD_REPLAY_SECRET_<STREAM>, the name in upper case.
const replaySecretPrefix = envPrefix + "REPLAY_SECRET_"

// ReplaySecretVariable is the variable that sets stream's replay.secret.
func ReplaySecretVariable(stream string) string { return replaySecretPrefix + strings.ToUpper(stream) }

func (r *Replay) applyDefaults() {
	orDefault(&r.Timeout, 10*time.Second)
	orDefault(&r.MinBackoff, time.Second)
	orDefault(&r.MaxBackoff, time.Minute)
	orDefault(&r.GiveUpAfter, time.Hour)
	orDefault(&r.ResendAfter, 30*time.Minute)
	orDefault(&r.Concurrency, 16)
}

// SigningSecret is the secret that signs the requests: replay.secret, or
// the content of replay.secret_file without surrounding space.
func (r Replay) SigningSecret() (string, error) {
	if r.Secret != "" || r.SecretFile == "" {
		return r.Secret, nil
	}
	data, err := os.ReadFile(r.SecretFile)
	if err != nil {
		return "", fmt.Errorf("replay.secret_file: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// validate checks the replay section of a stream of policy.
func (r Replay) validate(policy Policy, add func(sub, format string, args ...any)) {
	if !r.Enabled() {
		return
	}
	if policy != PolicyGapless {
		add("replay.url", "only the gapless policy requests replays, not %s", policy)
	}
	if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		add("replay.url", "%q is not an http or https URL", r.URL)
	}
	switch {
	case r.Secret != "":
		if _, err := DecodeStandardSecret(r.Secret); err != nil {
			add("replay.secret", "%v", err)
		}
	case r.SecretFile == "":
		add("replay.secret", "is required with replay.url: set DRIFTGUARD_REPLAY_SECRET_<STREAM> or replay.secret_file")
	}
	for sub, d := range map[string]time.Duration{"timeout": r.Timeout, "min_backoff": r.MinBackoff, "max_backoff": r.MaxBackoff, "give_up_after": r.GiveUpAfter, "resend_after": r.ResendAfter} {
		if d <= 0 {
			add("replay."+sub, "must be positive, got %s", d)
		}
	}
	if r.MaxBackoff < r.MinBackoff {
		add("replay.max_backoff", "%s is below replay.min_backoff (%s)", r.MaxBackoff, r.MinBackoff)
	}
	if r.Concurrency < 1 || r.Concurrency > 1000 {
		add("replay.concurrency", "must be between 1 and 1000, got %d", r.Concurrency)
	}
}

// String shows the section with its secret redacted.
func (r Replay) String() string { return redactedString(r) }

// LogValue logs the section with its secret redacted.
func (r Replay) LogValue() slog.Value { return slog.StringValue(r.String()) }
