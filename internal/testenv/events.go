package testenv

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
)

// Presence is a presence webhook in the seed's shape. Device and ExpiresAt
// are left out of the body when empty.
type Presence struct {
	EventID, User string
	// Device is the device the claim is about; "" for the member itself.
	Device string
	// Status defaults to ONLINE.
	Status  string
	Version int64
	// Timestamp and ExpiresAt are unix seconds; Timestamp defaults to
	// 1700000000.
	Timestamp, ExpiresAt int64
}

// Body is the webhook body, its fields in the seed's order.
func (p Presence) Body() []byte {
	status, ts := p.Status, p.Timestamp
	if status == "" {
		status = "ONLINE"
	}
	if ts == 0 {
		ts = 1_700_000_000
	}
	b := fmt.Appendf(nil, `{"event_id":%q,"user_id":%q`, p.EventID, p.User)
	if p.Device != "" {
		b = fmt.Appendf(b, `,"device_id":%q`, p.Device)
	}
	b = fmt.Appendf(b, `,"presence":%q,"sequence_number":%d,"timestamp":%d`, status, p.Version, ts)
	if p.ExpiresAt != 0 {
		b = fmt.Appendf(b, `,"expires_at":%d`, p.ExpiresAt)
	}
	return append(b, '}')
}

// BenchBody is the presence webhook the edge, decoder and schema
// benchmarks all take, so their costs can be read off one another: schema-
// valid, about 300 bytes, with the optional and extra fields real
// publishers send.
const BenchBody = `{"event_id":"evt_01J0Z3K9Q7M2B8C4D6E8F0G1H2","user_id":"usr_7f3a9c2e4b1d","presence":"AWAY","sequence_number":184467,"timestamp":1718900000,"device_id":"dev_macbook-pro-14_3f9a","expires_at":1718900300,"client":{"app":"desktop","version":"4.12.3","os":"macOS 14.5"},"status_text":"In a meeting until 15:30"}`

// SameJSON reports whether a and b are JSON texts of the same value. It is
// false when either is not JSON; callers print both texts when it is false,
// which shows a broken one too.
func SameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// Fataler is what *testing.T, *testing.B, *testing.F and *rapid.T all
// offer.
type Fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// Shipped returns a fresh copy of the shipped catalogue's stream name, for
// a test to change as it likes.
func Shipped(t Fataler, name string) *config.Stream {
	t.Helper()
	s := defaults(t).Streams[name]
	if s == nil {
		t.Fatal("the shipped catalogue has no stream " + name)
	}
	return s
}

// OnlyStream returns the default configuration with s as its only stream,
// so that what is made of the configuration, topics first, is s's alone.
func OnlyStream(t Fataler, s *config.Stream) *config.Config {
	t.Helper()
	cfg := defaults(t)
	cfg.Streams = map[string]*config.Stream{s.Name: s}
	return cfg
}

func defaults(t Fataler) *config.Config {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var _ Fataler = (*testing.T)(nil)
