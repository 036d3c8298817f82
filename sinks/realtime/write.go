package realtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/schemacheck"
)

// Clients write to an assign stream through the bridge (sends, receipts)
// with their token instead of a signed webhook: the bridge builds the
// event from the token, the path and the client's body, validates it as
// ingest does, produces it to `<stream>.in` as ingest does (acks=all,
// idempotent, the same record with dg-scheme "bridge"), then waits for
// the processor's decision on the outcomes topic and answers with it.

// writer is what writing to one assign stream takes.
type writer struct {
	cfg *config.Stream
	in  string
	// name and scheme are the dg-stream and dg-scheme header values,
	// shared by every record.
	name, scheme []byte
	schemas      *schemacheck.Stream
	// decisions are woken by the stream's outcomes reader.
	decisions *decisions
	// perUser and perConversation limit sends (bridge.send_rate); nil
	// when off.
	perUser, perConversation *buckets
}

func newWriter(s *config.Stream, topics naming.Topics, d *decisions, rate config.SendRate, now func() time.Time) (*writer, error) {
	schemas, err := schemacheck.ForStream(s)
	if err != nil {
		return nil, err
	}
	return &writer{cfg: s, in: topics.In, name: []byte(s.Name), scheme: []byte(record.SchemeBridge), schemas: schemas, decisions: d,
		perUser: newBuckets(rate.PerUser, now), perConversation: newBuckets(rate.PerConversation, now)}, nil
}

// producerOptions are the options of the bridge's producer, besides
// internal/kafka's (acks=all, idempotence, murmur2 placement): it lingers
// as ingest's does, and its batches are what the topics accept.
func producerOptions(linger time.Duration) []kgo.Opt {
	return []kgo.Opt{kgo.ProducerLinger(linger), kgo.ProducerBatchMaxBytes(record.ProducerBatchLimit(record.DefaultMaxMessageBytes))}
}

// writing is the start of a client's write: it is an assign stream's
// (else 404 not_chat) and the bridge produces. ok is false once it has
// answered.
func (b *Bridge) writing(q *request) (*writer, bool) {
	w := q.stream.writer
	switch {
	case w == nil:
		problem.Write(q.w, http.StatusNotFound, "not_chat", fmt.Sprintf("stream %q does not assign sequences: clients write only to chat (assign) streams", q.stream.cfg.Name), nil)
		return nil, false
	case b.producer == nil:
		q.w.Header().Set("Retry-After", "1")
		problem.Write(q.w, http.StatusServiceUnavailable, "starting", "the bridge is not connected to Kafka yet", nil)
		return nil, false
	}
	return w, true
}

// readBody reads the client's body, at most the stream's
// limits.max_body_bytes (413 over). ok is false once it has answered.
func readBody(q *request, w *writer) ([]byte, bool) {
	raw, err := io.ReadAll(http.MaxBytesReader(q.w, q.r.Body, w.cfg.Limits.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		problem.Write(q.w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over %d bytes", w.cfg.Limits.MaxBodyBytes), nil)
		return nil, false
	case err != nil:
		problem.Write(q.w, http.StatusBadRequest, "read", "the body could not be read", nil)
		return nil, false
	}
	return raw, true
}

// event validates body as ingest validates a webhook (schema, then the
// catalogue fields) and bounds it as ingest does (the stream's body limit,
// Kafka's record limit). ok is false once it has answered.
func (w *writer) event(q *request, body []byte, eventID string) (envelope.Fields, bool) {
	if int64(len(body)) > w.cfg.Limits.MaxBodyBytes {
		problem.Write(q.w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("with the fields the bridge sets, the event is %d bytes, over the stream's %d", len(body), w.cfg.Limits.MaxBodyBytes), nil)
		return envelope.Fields{}, false
	}
	doc, err := envelope.Parse(body)
	if err != nil {
		problem.Write(q.w, http.StatusBadRequest, "json", err.Error(), schemacheck.FieldProblems(err))
		return envelope.Fields{}, false
	}
	f, problems := w.schemas.Validate(doc, eventID)
	doc.Release()
	if problems != nil {
		problem.Write(q.w, http.StatusUnprocessableEntity, "schema", "the event does not match the stream's schema", problems)
		return envelope.Fields{}, false
	}
	if n := record.InputRecordBytes(len(w.name), len(w.scheme), len(f.Key), len(f.EventID), len(f.Type), len(body)); n > record.DefaultMaxMessageBytes {
		problem.Write(q.w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the event's Kafka record would be %d bytes, over the %d Kafka accepts", n, record.DefaultMaxMessageBytes), nil)
		return envelope.Fields{}, false
	}
	return f, true
}

// errPending is a write whose decision did not arrive within
// bridge.send_wait: its event may be decided later, or, when the broker
// did not ack it in time, may never have been written.
var errPending = errors.New("no decision within bridge.send_wait")

// write produces event f with body and waits, until bridge.send_wait after
// start, for the broker's ack and then for the processor's decision. A
// nil error is the decision; errPending, none in time; another error, a
// produce the broker refused.
func (b *Bridge) write(q *request, w *writer, body []byte, f envelope.Fields, start time.Time) (decision, error) {
	decided, done := w.decisions.await(f.EventID)
	defer done()
	// The wait ends with the request: a client that went away stops
	// waiting (its event may still be written and decided; its retry is a
	// duplicate).
	wait, cancel := context.WithDeadline(q.r.Context(), start.Add(b.cfg.SendWait))
	defer cancel()
	// The produce does not: with idempotence, franz-go fails every record
	// buffered for a partition when one of them is cancelled, so a record
	// gets kafka.produce_timeout as ingest's do, whatever its client does.
	produce, cancelProduce := context.WithTimeout(context.Background(), b.produceTimeout)
	rec := kafka.NewInput(w.in, w.name, w.scheme, body, kafka.InputFields{Key: f.Key, EventID: f.EventID, Type: f.Type}, b.now())
	acked := make(chan error, 1)
	b.producer.Produce(produce, &rec.Record, func(_ *kgo.Record, err error) {
		cancelProduce()
		acked <- err
	})
	// franz-go cannot fail a record whose idempotent produce request is in
	// flight, so the wait for its ack ends at the deadline too.
	select {
	case err := <-acked:
		if err != nil {
			return decision{}, err
		}
	case <-wait.Done():
		return decision{}, errPending
	}
	select {
	case d := <-decided:
		return d, nil
	case <-wait.Done():
		return decision{}, errPending
	}
}

// pending answers 202: the event's decision did not come in time. The
// client retries the same write (a send with the same client_message_id)
// and is answered with the decision, whichever attempt made it.
type pending struct {
	Status          string `json:"status"`
	EventID         string `json:"event_id"`
	ClientMessageID string `json:"client_message_id,omitempty"`
}

// refused answers a write whose produce the broker refused.
func (b *Bridge) refused(q *request, err error) {
	if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
		problem.Write(q.w, http.StatusRequestEntityTooLarge, "too_large", "the event's Kafka record is over what the topic accepts (max.message.bytes)", nil)
		return
	}
	b.log.Warn("a client's write was not produced", "stream", q.stream.cfg.Name, "err", b.kc.Explain(err))
	q.w.Header().Set("Retry-After", "1")
	problem.Write(q.w, http.StatusServiceUnavailable, "unavailable", "the event was not durably written; retry later", nil)
}

// writeStatus answers v as JSON with status.
func writeStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// rejectedStatus is the answer to a write the processor rejected for
// reason: 403 for a non-member, 409 for the conversation's own state
// (ended, full, a receipt ahead of its messages).
func rejectedStatus(reason record.Reason) int {
	if reason == record.ReasonNotMember {
		return http.StatusForbidden
	}
	return http.StatusConflict
}

// sendAck observes a send's acknowledgement latency by outcome.
func (b *Bridge) sendAck(stream, outcome string, start time.Time) {
	b.metrics.sendAck.With(prometheus.Labels{"stream": stream, "outcome": outcome}).Observe(time.Since(start).Seconds())
}
