package realtime_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/testenv"
)

// A live reader of a quiet topic lets the broker hold its fetch until a
// record comes (or for seconds), instead of asking again every few hundred
// milliseconds; a change written then still reaches it. On the real
// broker, whose fetch waits are what is counted.
func TestQuietReaderAsksTheBrokerRarely(t *testing.T) {
	stream := testenv.UniqueName("presence")
	e := newBridgeEnv(t, testenv.Kafka(t), presenceAs(stream, nil), "presence")
	tok := e.token("alice", stream)
	shown := func(version int64) {
		testenv.WaitFor(t, e.ctx, fmt.Sprintf("version %d shown", version), func() bool {
			var ent entityJSON
			return e.get("/v1/streams/"+stream+"/entities/u", tok, &ent) == http.StatusOK && ent.Version == version
		})
	}
	e.publish(stream, "u", 1, `{"presence":"ONLINE"}`)
	shown(1)
	reader := "driftguard-bridge-" + e.cfg.Kafka.Naming().For(stream).State
	before := testenv.KafkaRequests(t, e.ops.Registry, reader)["Fetch"]
	// Quiet for three seconds: a fetch held 200 ms would be asked again
	// 15 times; one held for seconds, at most twice (one may have been
	// answered just as the quiet began). A slower machine asks less, not
	// more.
	time.Sleep(3 * time.Second)
	if fetches := testenv.KafkaRequests(t, e.ops.Registry, reader)["Fetch"] - before; fetches > 2 {
		t.Errorf("the reader of %s sent %.0f fetches in 3 quiet seconds, want at most 2", stream, fetches)
	}
	e.publish(stream, "u", 2, `{"presence":"AWAY"}`)
	shown(2)
}
