// Package peer is what the benchmarks' peers share: the HTTP edge in front
// of each (route, method, content type, signature, body limit, the
// statuses driftguard's ingest answers), the commands every peer has
// (serve, reset, state) and their flags.
//
// A peer is what a team would build instead of driftguard for one stream,
// fed the same signed webhooks and checked for the same final state. Each
// verifies signatures with ingest's own schemes, configured from the
// stream's catalogue entry, so a peer accepts exactly what driftguard's
// edge accepts and pays the same for it.
package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
)

// Edge reads and verifies the webhooks of one stream.
type Edge struct {
	stream *config.Stream
	scheme ingest.Scheme
	log    *slog.Logger
}

// CatalogueStream is the shipped catalogue's entry for the stream name,
// with every default filled in: the limits and TTLs a peer takes as its
// defaults are driftguard's.
func CatalogueStream(name string) (*config.Stream, error) {
	cfg, err := config.Default()
	if err != nil {
		return nil, err
	}
	s := cfg.Streams[name]
	if s == nil {
		return nil, fmt.Errorf("the catalogue has no stream %q", name)
	}
	return s, nil
}

// NewEdge verifies the webhooks of stream s with secrets, under scheme
// (empty: s's own, as driftguard's ingest uses it).
func NewEdge(s *config.Stream, scheme string, secrets []string, log *slog.Logger) (*Edge, error) {
	copied := *s
	if scheme != "" {
		copied.Signature.Scheme = scheme
	}
	copied.Signature.Secrets = secrets
	sch, err := ingest.NewScheme(&copied)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Edge{stream: &copied, scheme: sch, log: log}, nil
}

// Stream is the catalogue entry the edge serves.
func (e *Edge) Stream() *config.Stream { return e.stream }

// Path is the stream's webhook route, the same as driftguard's.
func (e *Edge) Path() string { return "/v1/webhooks/" + e.stream.Name }

// Read returns the body of a request to the stream once its method,
// content type, signature and size are checked, in the edge's order (design
// §3): headers first, so forged floods cost no body reads. When it returns
// false it has answered the request.
func (e *Edge) Read(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		problem.Write(w, http.StatusMethodNotAllowed, "method", "webhooks are POSTed", nil)
		return nil, false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		problem.Write(w, http.StatusUnsupportedMediaType, "content_type", "Content-Type must be application/json", nil)
		return nil, false
	}
	if err := e.scheme.CheckHeaders(r.Header, time.Now()); err != nil {
		e.rejectSignature(w, err)
		return nil, false
	}
	limit := e.stream.Limits.MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			problem.Write(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over %d bytes", limit), nil)
			return nil, false
		}
		problem.Write(w, http.StatusBadRequest, "read", "the body could not be read", nil)
		return nil, false
	}
	if _, err := e.scheme.Verify(r.Header, body); err != nil {
		e.rejectSignature(w, err)
		return nil, false
	}
	return body, true
}

func (e *Edge) rejectSignature(w http.ResponseWriter, err error) {
	e.log.Info("webhook rejected", "stream", e.stream.Name, "reason", "signature")
	problem.Write(w, http.StatusUnauthorized, "signature", err.Error(), nil)
}

// Decode parses a verified body into v, answering 400 when it is not JSON
// and 422 when a field has the wrong JSON type; it reports whether v holds
// the body.
func Decode(w http.ResponseWriter, body []byte, v any) bool {
	err := json.Unmarshal(body, v)
	if err == nil {
		return true
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		Invalid(w, []problem.Field{{Pointer: "/" + strings.ReplaceAll(typeErr.Field, ".", "/"), Detail: "wrong type: JSON " + typeErr.Value + " where " + typeErr.Type.String() + " is expected"}})
		return false
	}
	problem.Write(w, http.StatusBadRequest, "json", err.Error(), nil)
	return false
}

// Check collects what a decoded payload lacks, each problem at its JSON
// pointer, as the stream's schema would report it.
type Check struct {
	Problems []problem.Field
}

// maxIDBytes is the schemas' maxLength of ids and keys.
const maxIDBytes = 256

// ID checks a required id or key: a string of 1 to 256 bytes.
func (c *Check) ID(pointer, v string) {
	switch {
	case v == "":
		c.Add(pointer, "missing required property")
	case len(v) > maxIDBytes:
		c.Add(pointer, fmt.Sprintf("longer than %d bytes", maxIDBytes))
	}
}

// Add records a problem at pointer.
func (c *Check) Add(pointer, detail string) {
	c.Problems = append(c.Problems, problem.Field{Pointer: pointer, Detail: detail})
}

// Failed answers 422 with the problems found, if any, and reports whether
// there were some.
func (c *Check) Failed(w http.ResponseWriter) bool {
	if len(c.Problems) == 0 {
		return false
	}
	Invalid(w, c.Problems)
	return true
}

// Invalid answers 422 for valid JSON that a peer cannot use, each problem
// located by its JSON pointer, as the edge does for a schema failure.
func Invalid(w http.ResponseWriter, problems []problem.Field) {
	problem.Write(w, http.StatusUnprocessableEntity, "schema", "the payload does not match the stream's schema", problems)
}

// Unavailable answers 503 when the store failed: the publisher retries,
// and since a peer applies each webhook atomically, the retry either
// applies it or is a duplicate.
func (e *Edge) Unavailable(w http.ResponseWriter, err error) {
	e.log.Warn("store failed", "stream", e.stream.Name, "err", err)
	w.Header().Set("Retry-After", "1")
	problem.Write(w, http.StatusServiceUnavailable, "unavailable", "the event was not durably applied; retry later", nil)
}

// Accepted is a peer's 202 body: driftguard's, with the decision the peer
// took in place of the Kafka position (a peer decides before it answers).
type Accepted struct {
	Status  string `json:"status"`
	Stream  string `json:"stream"`
	EventID string `json:"event_id"`
	Outcome string `json:"outcome"`
}

// Outcomes a peer decides, named as driftguard's processors name them.
const (
	OutcomeApplied     = string(record.Applied)
	OutcomeDuplicate   = string(record.Duplicate)
	OutcomeStale       = string(record.Stale)
	OutcomeQuarantined = string(record.Quarantined)
	OutcomeRejected    = string(record.Rejected)
)

// Accept answers 202 with the outcome of the event.
func (e *Edge) Accept(w http.ResponseWriter, eventID, outcome string) {
	body, _ := json.Marshal(Accepted{Status: "accepted", Stream: e.stream.Name, EventID: eventID, Outcome: outcome})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(append(body, '\n'))
}

// StoreTimeout bounds one webhook's work in the store, as driftguard's
// edge waits at most 5 s for the broker's ack before it answers 503.
const StoreTimeout = 5 * time.Second

// StoreContext is the context of a webhook's work in the store: it is not
// cut short when the publisher hangs up (the work is atomic and finishes
// either way; cancelling it would only cost the pooled connection), and it
// ends after StoreTimeout.
func StoreContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), StoreTimeout)
}
