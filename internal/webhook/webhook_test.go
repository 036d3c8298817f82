package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A Retry-After header in seconds or as an HTTP date is the wait the
// answer asks for; one absent, malformed, negative or past asks for none.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"7":                             7 * time.Second,
		"0":                             0,
		"-3":                            0,
		"soon":                          0,
		"Wed, 02 Dec 2026 12:00:30 GMT": 30 * time.Second,
		"Wed, 02 Dec 2026 11:59:00 GMT": 0,
		"999999999":                     24 * time.Hour,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", v, got, want)
		}
	}
}

// Post reports the Retry-After of the answer it got.
func TestPostReportsRetryAfter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	p := &Publisher{URL: srv.URL, Secret: "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	resp, err := p.Post(context.Background(), "msg_1", []byte(`{}`))
	if err != nil || resp.Status != http.StatusServiceUnavailable || resp.RetryAfter != 5*time.Second {
		t.Fatalf("got %+v, %v", resp, err)
	}
}
