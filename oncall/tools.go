package oncall

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
)

// Tools answer inspect and explain for the streams of a configuration,
// from the command line and the admin endpoints alike.
type Tools struct {
	Conn  kafka.Conn
	Names naming.Prefixes
	// Known reports whether a stream is in the catalogue.
	Known func(stream string) bool
	// Holds reads what the stream's processor holds for key (package
	// processors' Inspection); found is false when it holds nothing.
	Holds func(ctx context.Context, stream, key string) (holds any, found bool, err error)
	// FromClickHouse, when set, reads an event's decisions from ClickHouse
	// (Explain falls back to Kafka when it fails).
	FromClickHouse DecisionsOf
}

// DefaultLast is how many of a key's last decisions inspect shows unless
// told otherwise.
const DefaultLast = 10

// KeyReport is what inspect says of a key: what the processor holds for
// it (null when nothing) and its last decisions, oldest first.
type KeyReport struct {
	Stream    string           `json:"stream"`
	Key       string           `json:"key"`
	Holds     any              `json:"holds"`
	Decisions []record.Outcome `json:"decisions"`
}

// ErrUnknownStream is returned for a stream the catalogue lacks.
var ErrUnknownStream = errors.New("unknown stream")

// Inspect reports what the processor holds for key of stream and its last
// decisions.
func (t *Tools) Inspect(ctx context.Context, stream, key string, last int) (KeyReport, error) {
	if !t.Known(stream) {
		return KeyReport{}, ErrUnknownStream
	}
	rep := KeyReport{Stream: stream, Key: key}
	// The decisions first: a processor commits a decision's outcome and
	// its table write together, so the table read after them is never
	// older than the last decision shown.
	var err error
	if rep.Decisions, err = KeyDecisions(ctx, t.Conn, t.Names.For(stream), key, last); err != nil {
		return KeyReport{}, err
	}
	holds, found, err := t.Holds(ctx, stream, key)
	if err != nil {
		return KeyReport{}, err
	}
	if found {
		rep.Holds = holds
	}
	return rep, nil
}

// Explain explains eventID of stream.
func (t *Tools) Explain(ctx context.Context, stream, eventID string) (Explanation, error) {
	if !t.Known(stream) {
		return Explanation{}, ErrUnknownStream
	}
	return Explain(ctx, t.Conn, t.Names, stream, eventID, t.FromClickHouse)
}

// The admin endpoints' patterns (net/http.ServeMux), for the admin server
// to mount KeyHandler and EventHandler on.
const (
	KeyPattern   = "GET /admin/v1/streams/{stream}/keys/{key}"
	EventPattern = "GET /admin/v1/streams/{stream}/events/{id}"
)

// KeyHandler serves inspect as JSON (a KeyReport) at KeyPattern, with
// `?last=N` decisions (default DefaultLast). A key the processor holds
// nothing for and that has no decision is 404; an unknown stream too.
func (t *Tools) KeyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last := DefaultLast
		if v := r.URL.Query().Get("last"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 10000 {
				problem.Write(w, http.StatusBadRequest, "invalid-parameter", "last must be a number from 0 to 10000", nil)
				return
			}
			last = n
		}
		rep, err := t.Inspect(r.Context(), r.PathValue("stream"), r.PathValue("key"), last)
		if writeError(w, err) {
			return
		}
		if rep.Holds == nil && len(rep.Decisions) == 0 {
			problem.Write(w, http.StatusNotFound, "not-found", "the processor holds nothing for this key and no decision is recorded", nil)
			return
		}
		writeJSON(w, rep)
	})
}

// EventHandler serves explain as JSON (an Explanation) at EventPattern;
// an event nothing is known of is still 200, with where "not_decided".
func (t *Tools) EventHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x, err := t.Explain(r.Context(), r.PathValue("stream"), r.PathValue("id"))
		if writeError(w, err) {
			return
		}
		writeJSON(w, x)
	})
}

// writeError answers err, if any, and reports whether it did.
func writeError(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnknownStream):
		problem.Write(w, http.StatusNotFound, "unknown-stream", "no such stream in the catalogue", nil)
	default:
		// Kafka unreachable or a topic missing: retry later.
		w.Header().Set("Retry-After", "5")
		problem.Write(w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
