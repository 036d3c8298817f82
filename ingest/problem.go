package ingest

import (
	"encoding/json"
	"net/http"
)

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Errors locate each payload problem by JSON pointer (400 and 422).
	Errors []FieldProblem `json:"errors,omitempty"`
}

// FieldProblem is one problem in the payload.
type FieldProblem struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// problemTypeBase prefixes problem types; the suffix is stable and
// documented in docs/ingest.md.
const problemTypeBase = "https://driftguard.dev/problems/"

// result is what serve wrote: the status, and for a rejection its reason
// (the metric label).
type result struct {
	status int
	reason string
}

func writeProblem(w http.ResponseWriter, status int, kind, detail string, errs []FieldProblem) result {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{
		Type: problemTypeBase + kind, Title: http.StatusText(status), Status: status,
		Detail: detail, Errors: errs,
	})
	return result{status: status, reason: kind}
}

func writeJSON(w http.ResponseWriter, status int, v any) result {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
	return result{status: status}
}
