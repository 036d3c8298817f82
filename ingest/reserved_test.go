package ingest

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// An operator action's type, sent as a signed webhook, is refused before
// anything reaches `<stream>.in`: publishers can never write an action.
func TestControlTypeRefusedAtTheEdge(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	brokers := testenv.Kafka(t)
	s := testenv.Shipped(t, "orders")
	s.Name = testenv.UniqueName("reserved")
	s.Signature.Secrets = []string{specSecret}
	cl := testenv.Topics(t, ctx, testenv.OnlyStream(t, s), brokers)
	defer cl.Close()
	edge := serveEdge(t, brokers, s, Options{})
	post := func(id, typ string) reply {
		d := signedDelivery(t, specSecret, "msg_"+id, []byte(`{"event_id":"`+id+`","event_type":"`+typ+`","order_id":"o-1","parent_id":"o-1","payload":{"action":"abandon","key":"o-1","requested_by":"mallory"}}`))
		d.stream = s.Name
		return d.send(t, ctx, edge.URL)
	}
	for i, typ := range []string{record.ControlType, "driftguard.anything"} {
		r := post(fmt.Sprintf("evt-%d", i), typ)
		if r.status != http.StatusUnprocessableEntity {
			t.Fatalf("type %s: status %d, want 422; body %s", typ, r.status, r.body)
		}
		if p := checkProblem(t, r); p.Type != "https://driftguard.dev/problems/reserved_type" || len(p.Errors) != 1 || p.Errors[0].Pointer != "/event_type" {
			t.Fatalf("type %s: problem %+v", typ, p)
		}
	}
	// A publisher's own type still goes through, and is the only record.
	if r := post("evt-order", "order.created"); r.status != http.StatusAccepted {
		t.Fatalf("order.created: status %d; body %s", r.status, r.body)
	}
	recs := testenv.ReadTopic(t, brokers, s.Name+".in")
	if len(recs) != 1 || string(kafka.Header(recs[0], record.HeaderType)) != "order.created" {
		t.Fatalf("%s.in holds %d records, want only the order", s.Name, len(recs))
	}
}
