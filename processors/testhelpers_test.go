package processors

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/lovoo/goka/tester"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// seen reports whether id is in the row's recent-ids memory.
func (r *Row) seen(id string) bool { return slices.Contains(r.Recent, idHash(id)) }

// shipped returns a fresh copy of the shipped catalogue's stream.
func shipped(t interface{ Fatal(...any) }, name string) *config.Stream {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Streams[name]
}

func presence(t interface{ Fatal(...any) }) *config.Stream { return shipped(t, "presence") }
func workflow(t interface{ Fatal(...any) }) *config.Stream { return shipped(t, "workflow") }
func chat(t interface{ Fatal(...any) }) *config.Stream     { return shipped(t, "chat") }
func orders(t interface{ Fatal(...any) }) *config.Stream   { return shipped(t, "orders") }

// presenceBody is a presence webhook body for user at version, with event id.
func presenceBody(id, user string, version int64, status string) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"user_id":%q,"presence":%q,"sequence_number":%d,"timestamp":1700000000}`, id, user, status, version)
}

// deviceBody is a presence body about one device of user; expiresAt (unix
// seconds) is left out when 0.
func deviceBody(id, user, device string, version int64, status string, timestamp, expiresAt int64) []byte {
	body := fmt.Appendf(nil, `{"event_id":%q,"user_id":%q,"device_id":%q,"presence":%q,"sequence_number":%d,"timestamp":%d`, id, user, device, status, version, timestamp)
	if expiresAt != 0 {
		body = fmt.Appendf(body, `,"expires_at":%d`, expiresAt)
	}
	return append(body, '}')
}

// redeliveries draws how ev reaches the processor: one to three copies,
// and perhaps a retry of the same event under a new id.
func redeliveries(t *rapid.T, ev Event) []Event {
	out := make([]Event, rapid.IntRange(1, 3).Draw(t, "copies"))
	for i := range out {
		out[i] = ev
	}
	if rapid.Bool().Draw(t, "retry with a new id") {
		retry := ev
		retry.EventID += "-retry"
		out = append(out, retry)
	}
	return out
}

// streamTopics creates the topics of stream s on the brokers and returns a
// client of them, with opts, for the caller to close.
func streamTopics(t testing.TB, ctx context.Context, brokers []string, s *config.Stream, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Streams = map[string]*config.Stream{s.Name: s}
	return testenv.Topics(t, ctx, cfg, brokers, opts...)
}

// rawRecords takes every record left on a tracker.
func rawRecords(qt *tester.QueueTracker) [][]byte {
	var out [][]byte
	for {
		_, raw, ok := qt.NextRaw()
		if !ok {
			return out
		}
		out = append(out, raw)
	}
}
