package clickhouse

import (
	"context"
	"testing"
	"time"
)

// An INSERT's context outlasts the sink's by its grace, and ends at once
// when the INSERT is done with it.
func TestOutlastEndsAGraceAfterItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	long, stopLong := outlast(ctx, time.Hour)
	defer stopLong()
	short, stopShort := outlast(ctx, time.Millisecond)
	defer stopShort()
	if long.Err() != nil || short.Err() != nil {
		t.Fatal("ended before its context")
	}
	cancel()
	select {
	case <-short.Done():
	case <-time.After(time.Minute):
		t.Fatal("did not end its grace after its context")
	}
	if long.Err() != nil {
		t.Fatal("ended before its grace of an hour")
	}
	stopLong()
	if long.Err() == nil {
		t.Fatal("still running after stop")
	}
}
