package ingest

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
)

// FieldProblem is one problem in the payload.
type FieldProblem = problem.Field

// result is what serve wrote: the status, and for a rejection its reason
// (the metric label).
type result struct {
	status int
	reason string
}

// writeProblem refuses a request with a problem document, and closes its
// connection: a connection is worth keeping for a publisher whose
// webhooks are taken, and never for a stranger, whose requests are all
// refused (a 404 or a 401 would otherwise leave it a connection to hold
// idle, one of http.max_connections).
var connectionClose = []string{"close"}

func writeProblem(w http.ResponseWriter, status int, kind, detail string, errs []FieldProblem) result {
	w.Header()["Connection"] = connectionClose
	problem.Write(w, status, kind, detail, errs)
	return result{status: status, reason: kind}
}

// writeAccepted answers 202 with a. The body is built by hand, every
// request pays for it; its encoding is checked against encoding/json's in
// the tests.
func writeAccepted(w http.ResponseWriter, a Accepted) result {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusAccepted)
	// The writer copies the body, so its buffer is reused at once.
	pooled := replyBuffers.Get().(*[]byte)
	buf := (*pooled)[:0]
	buf = append(buf, `{"status":`...)
	buf = record.AppendJSONString(buf, a.Status, true)
	buf = append(buf, `,"stream":`...)
	buf = record.AppendJSONString(buf, a.Stream, true)
	buf = append(buf, `,"event_id":`...)
	buf = record.AppendJSONString(buf, a.EventID, true)
	buf = append(buf, `,"partition":`...)
	buf = strconv.AppendInt(buf, int64(a.Partition), 10)
	buf = append(buf, `,"offset":`...)
	buf = strconv.AppendInt(buf, a.Offset, 10)
	buf = append(buf, "}\n"...)
	_, _ = w.Write(buf)
	if cap(buf) <= maxPooledReply {
		*pooled = buf
		replyBuffers.Put(pooled)
	}
	return result{status: http.StatusAccepted}
}

// replyBuffers hold 202 bodies while they are written.
var replyBuffers = sync.Pool{New: func() any {
	buf := make([]byte, 0, 256)
	return &buf
}}

// maxPooledReply keeps a reply for an outsized id out of the pool.
const maxPooledReply = 1 << 10

var (
	jsonContentType = []string{"application/json"}
	nosniff         = []string{"nosniff"}
)
