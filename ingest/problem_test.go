package ingest

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"pgregory.net/rapid"
)

// TestWriteAcceptedMatchesEncodingJSON: the hand-built 202 body is byte for
// byte what encoding/json writes, whatever the ids hold.
func TestWriteAcceptedMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := rapid.OneOf(rapid.StringMatching(`[a-zA-Z0-9_:.-]{0,40}`), rapid.String())
		a := Accepted{
			Status:    "accepted",
			Stream:    text.Draw(t, "stream"),
			EventID:   text.Draw(t, "event_id"),
			Partition: rapid.Int32().Draw(t, "partition"),
			Offset:    rapid.Int64().Draw(t, "offset"),
		}
		w := httptest.NewRecorder()
		writeAccepted(w, a)
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(a); err != nil {
			t.Fatal(err)
		}
		if got := w.Body.String(); got != want.String() {
			t.Fatalf("body %q, encoding/json writes %q", got, want.String())
		}
		if w.Code != 202 || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, content type %q", w.Code, w.Header().Get("Content-Type"))
		}
	})
}
