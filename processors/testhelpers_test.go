package processors

import (
	"fmt"

	"github.com/driftguard/driftguard/internal/config"
)

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
