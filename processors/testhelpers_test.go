package processors

import (
	"fmt"

	"github.com/driftguard/driftguard/internal/config"
)

// presence returns the shipped presence stream.
func presence(t interface{ Fatal(...any) }) *config.Stream {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Streams["presence"]
}

// presenceBody is a presence webhook body for user at version, with event id.
func presenceBody(id, user string, version int64, status string) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"user_id":%q,"presence":%q,"sequence_number":%d,"timestamp":1700000000}`, id, user, status, version)
}
