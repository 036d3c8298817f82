package peertest

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// Rejection is a request a peer must refuse, and the status it must
// answer.
type Rejection struct {
	Name   string
	Header http.Header
	Body   []byte
	Status int
}

// Signed is a rejection of body for its content: its signature is good.
func (c *Client) Signed(t testing.TB, name, body string, status int) Rejection {
	t.Helper()
	h, err := c.Sign("delivery-"+name, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return Rejection{Name: name, Header: h, Body: []byte(body), Status: status}
}

// BadSignatures are good, a body the peer would accept, sent unsigned,
// changed after signing, and signed with another secret: each a 401.
func (c *Client) BadSignatures(t testing.TB, good []byte) []Rejection {
	t.Helper()
	h, err := c.Sign("delivery-good", good)
	if err != nil {
		t.Fatal(err)
	}
	// One byte changed, inside the first key.
	at := bytes.IndexByte(good, '"') + 1
	tampered := bytes.Clone(good)
	tampered[at] ^= 1
	other := *c
	if strings.HasPrefix(c.Secret, "whsec_") {
		other.Secret = OtherStandardSecret
	} else {
		other.Secret = OtherBodySecret
	}
	otherHeader, err := other.Sign("delivery-good", good)
	if err != nil {
		t.Fatal(err)
	}
	return []Rejection{
		{"unsigned", http.Header{}, good, http.StatusUnauthorized},
		{"changed after signing", h, tampered, http.StatusUnauthorized},
		{"another secret", otherHeader, good, http.StatusUnauthorized},
	}
}

// ExpectRejected sends each request and fails the test for every answer
// that is not its status with a problem body.
func (c *Client) ExpectRejected(t testing.TB, requests []Rejection) {
	t.Helper()
	for _, r := range requests {
		resp, err := c.SendRaw(r.Header, r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != r.Status || !strings.Contains(resp.Body, `"status":`) {
			t.Errorf("%s: got %d %s, want %d with a problem body", r.Name, resp.Status, resp.Body, r.Status)
		}
	}
}
