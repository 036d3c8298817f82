package config

import (
	"math"
	"time"
)

// DefaultSendWait is how long a client's send through the bridge waits for
// the processor's decision by default (bridge.send_wait).
const DefaultSendWait = 5 * time.Second

// SendRate limits the messages clients send through the bridge
// (bridge.send_rate), a token bucket per user and one per conversation. A
// send over either is answered 429 with Retry-After, before it reaches
// Kafka. Both are off by default.
type SendRate struct {
	// PerUser bounds one user's sends, across their conversations and
	// devices.
	PerUser TokenBucket `yaml:"per_user"`
	// PerConversation bounds the sends to one conversation, whoever
	// sends: what keeps one busy conversation from taking its partition's
	// whole processor.
	PerConversation TokenBucket `yaml:"per_conversation"`
}

// TokenBucket allows Rate events a second, in bursts of up to Burst.
type TokenBucket struct {
	// Rate is the sustained events a second; 0 is off.
	Rate float64 `yaml:"rate"`
	// Burst is how many may come at once after a quiet spell. Default:
	// one second's worth (Rate rounded up), at least 1.
	Burst int `yaml:"burst"`
}

// On reports whether the bucket limits anything.
func (b TokenBucket) On() bool { return b.Rate > 0 }

func (b *TokenBucket) applyDefaults() {
	if b.Rate > 0 && b.Burst == 0 {
		b.Burst = int(max(1, math.Ceil(b.Rate)))
	}
}

func (b TokenBucket) validate(path string, add func(path, format string, args ...any)) {
	if b.Rate < 0 || math.IsNaN(b.Rate) || math.IsInf(b.Rate, 0) {
		add(path+".rate", "must be 0 (off) or a positive number of events a second, got %v", b.Rate)
	}
	if b.Burst < 0 {
		add(path+".burst", "must be at least 1, got %d", b.Burst)
	}
}

// applySendDefaults sets the defaults of the bridge's write path.
func (b *Bridge) applySendDefaults() {
	if b.SendWait == 0 {
		b.SendWait = DefaultSendWait
	}
	b.SendRate.PerUser.applyDefaults()
	b.SendRate.PerConversation.applyDefaults()
}

// validateSend checks the bridge's write path settings.
func (b *Bridge) validateSend(add func(path, format string, args ...any)) {
	if b.SendWait < 100*time.Millisecond || b.SendWait > time.Minute {
		add("bridge.send_wait", "must be between 100ms and 1m, got %s", b.SendWait)
	}
	b.SendRate.PerUser.validate("bridge.send_rate.per_user", add)
	b.SendRate.PerConversation.validate("bridge.send_rate.per_conversation", add)
}
