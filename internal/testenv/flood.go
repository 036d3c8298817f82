package testenv

// FloodReport is what internal/testenv/flood prints: the answers to its
// junk and to its valid webhooks.
type FloodReport struct {
	Junk  FloodJunk  `json:"junk"`
	Valid FloodValid `json:"valid"`
}

// FloodJunk tallies the junk's answers.
type FloodJunk struct {
	Sent int64 `json:"sent"`
	// Unsigned: 401 to a request without signature headers, refused
	// before its body is read.
	Unsigned int64 `json:"unsigned"`
	// BodiesRead: 401 to a wrongly signed request, refused after its body
	// was read and its signature checked.
	BodiesRead int64 `json:"bodies_read"`
	// OverBudget: 503, refused before the body for want of room.
	OverBudget int64  `json:"over_budget"`
	Transport  int64  `json:"transport_errors"`
	Other      int64  `json:"other"`
	FirstOther string `json:"first_other,omitempty"`
}

// FloodValid is what the publisher of valid webhooks saw.
type FloodValid struct {
	// Accepted are the event ids answered 202, with each one's latency in
	// seconds.
	Accepted  []string  `json:"accepted"`
	Latencies []float64 `json:"latencies"`
	// Refused are the others, each with its answer.
	Refused []string `json:"refused"`
}
