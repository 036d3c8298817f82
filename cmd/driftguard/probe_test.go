package main

import (
	"strings"
	"testing"
)

// `driftguard probe`, as the chart's helm test runs it, against a running
// `driftguard ingest` (on kfake): a webhook signed with the stream's secret
// is accepted and /readyz answers 200, so it exits 0; a wrong secret, a
// body the schema refuses, or a /readyz that does not answer 200 each
// make it exit non-zero, naming the failed check.
func TestProbe(t *testing.T) {
	webhooks, ops := runIngestOnKfake(t)
	readyz := "http://" + ops + "/readyz"

	body := `{"event_id":"probe-1","user_id":"probe","presence":"OFFLINE","sequence_number":1,"timestamp":0,"expires_at":0}`
	webhook := []string{"probe", "--webhook", "http://" + webhooks, "--stream", "presence", "--body", body}
	t.Setenv("PROBE_SECRET", demoSecret)
	t.Setenv("PROBE_WRONG_SECRET", "whsec_"+strings.Repeat("QUFB", 8))

	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"accepted and ready", append(webhook, "--secret-env", "PROBE_SECRET", "--ready", readyz, "--ready", readyz), 0,
			"/v1/webhooks/presence: 202"},
		// The default variable is the stream's, as on the ingest pods.
		{"the stream's variable", append(webhook, "--ready", readyz), 0, "GET " + readyz + ": 200"},
		{"wrong secret", append(webhook, "--secret-env", "PROBE_WRONG_SECRET"), 1, "answered 401, want 202"},
		{"body refused", []string{"probe", "--webhook", "http://" + webhooks, "--stream", "presence", "--body", `{"user_id":"probe"}`}, 1, "answered 422, want 202"},
		// The webhook port serves no /readyz: 404.
		{"not ready", []string{"probe", "--ready", readyz, "--ready", "http://" + webhooks + "/readyz"}, 1, "answered 404, want 200"},
		{"nobody listening", []string{"probe", "--ready", "http://" + freeLoopbackAddr(t) + "/readyz"}, 1, "connection refused"},
		{"no secret", append(webhook, "--secret-env", "PROBE_NO_SUCH_VARIABLE"), 2, "PROBE_NO_SUCH_VARIABLE holds no secret"},
		{"nothing to probe", []string{"probe"}, 2, "nothing to probe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != tc.wantCode {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.wantCode, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout+r.stderr, tc.want) {
				t.Errorf("output lacks %q\nstdout: %s\nstderr: %s", tc.want, r.stdout, r.stderr)
			}
		})
	}
}
