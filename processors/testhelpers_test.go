package processors

import (
	"encoding/json"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// rawReader is a topic's records in order: goka's tester's QueueTracker,
// or the shipped runtime's tracker.
type rawReader interface {
	NextRaw() (key string, value []byte, ok bool)
}

func outcomes(t testenv.Fataler, qt rawReader) []record.Outcome {
	return records[record.Outcome](t, qt)
}

// records decodes every record left on qt.
func records[T any](t testenv.Fataler, qt rawReader) []T {
	t.Helper()
	var out []T
	for _, raw := range rawRecords(qt) {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal("record ", string(raw), ": ", err)
		}
		out = append(out, v)
	}
	return out
}

// rawRecords takes every record left on a tracker.
func rawRecords(qt rawReader) [][]byte {
	var out [][]byte
	for {
		_, raw, ok := qt.NextRaw()
		if !ok {
			return out
		}
		out = append(out, raw)
	}
}
