package decidetest

import (
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A Model is one policy's model on the shipped stream it draws for.
type Model struct {
	// Stream names the shipped stream.
	Stream string
	// Draw draws a history for key.
	Draw func(t *rapid.T, s *config.Stream, key string) History
	// Limits, when set, changes the stream as the model needs (orders: a
	// TTL and a buffer that histories reach).
	Limits func(s *config.Stream)
}

// StreamOf is a fresh copy of the model's stream, with its limits.
func (m Model) StreamOf(t testenv.Fataler) *config.Stream {
	s := testenv.Shipped(t, m.Stream)
	if m.Limits != nil {
		m.Limits(s)
	}
	return s
}

// Models are the model of every policy: latest with device rows
// (presence), gapless with terminal states (workflow), assign (chat), and
// latest with a parent join (orders).
var Models = []Model{
	{Stream: "presence", Draw: Presence},
	{Stream: "workflow", Draw: Workflow},
	{Stream: "chat", Draw: Assign},
	{Stream: "orders", Draw: Orders, Limits: func(s *config.Stream) {
		s.Parent.TTL, s.Parent.Buffer = 20*time.Second, 4
	}},
}
