package testenv

// FloodReport is what internal/testenv/flood prints: the answers to its
// junk and to its valid webhooks.
type FloodReport struct {
	Junk  FloodJunk  `json:"junk"`
	Valid FloodValid `json:"valid"`
	// Slow and Hoard are what the connections that hold the edge's
	// resources saw: slow bodies at declared lengths, and connections
	// left idle.
	Slow  FloodHeld `json:"slow"`
	Hoard FloodHeld `json:"hoard"`
}

// FloodHeld tallies connections that each hold what they can of the edge
// until it closes them, and are then opened again.
type FloodHeld struct {
	// Dials are the connections opened (DialErrors failed).
	Dials      int64 `json:"dials"`
	DialErrors int64 `json:"dial_errors"`
	// Answers counts how the edge ended them, by HTTP status, "0" for a
	// close without an answer (a connection over its source's cap, closed
	// for a new one at the cap, or at a timeout of the server's).
	Answers map[string]int64 `json:"answers"`
	// HeldAtEnd were still open and unanswered when the attack ended.
	HeldAtEnd int64 `json:"held_at_end"`
	// LongestOpen is the longest a connection stayed open before the edge
	// ended it, in seconds.
	LongestOpen float64 `json:"longest_open"`
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
