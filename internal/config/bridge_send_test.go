package config

import (
	"testing"
	"time"
)

// The bridge's write path: a 5 s wait and no rate limit unless asked; a
// rate without a burst allows one second's worth at once.
func TestBridgeSendDefaults(t *testing.T) {
	var b Bridge
	b.applySendDefaults()
	if b.SendWait != 5*time.Second || b.SendRate.PerUser.On() || b.SendRate.PerConversation.On() {
		t.Fatalf("defaults: wait %s, rates %+v", b.SendWait, b.SendRate)
	}
	b = Bridge{SendRate: SendRate{PerUser: TokenBucket{Rate: 2.5}, PerConversation: TokenBucket{Rate: 0.2}}}
	b.applySendDefaults()
	if b.SendRate.PerUser.Burst != 3 || b.SendRate.PerConversation.Burst != 1 {
		t.Fatalf("bursts %d and %d, want 3 and 1", b.SendRate.PerUser.Burst, b.SendRate.PerConversation.Burst)
	}
}
