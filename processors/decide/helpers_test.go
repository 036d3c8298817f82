package decide

import (
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/testenv"
)

// read reads body through the rules, as the processor does, received at
// atMs.
func read(t testenv.Fataler, r *Rules, body []byte, atMs int64) Event {
	t.Helper()
	doc, err := envelope.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	defer doc.Release()
	ev, err := r.Read(doc, "")
	if err != nil {
		t.Fatal(err)
	}
	ev.Body, ev.ReceivedAtMs = body, atMs
	return ev
}

// week is the default dedup window, in ms.
const week = 7 * 24 * 3600 * 1000
