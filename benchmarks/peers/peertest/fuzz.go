package peertest

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
)

// ServeSigned signs body as c does and serves it to h in process, for a
// fuzz target that feeds a peer's handler any body without a network.
func (c *Client) ServeSigned(t testing.TB, h http.Handler, edge *peer.Edge, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	header, err := c.Sign("fuzz-delivery", body)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, edge.Path(), bytes.NewReader(body))
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
