// Package problem writes RFC 9457 problem details, the error body of every
// driftguard HTTP endpoint: the ingest edge and the realtime bridge answer
// errors alike.
package problem

import (
	"encoding/json"
	"net/http"
)

// TypeBase prefixes problem types; the suffixes are stable and documented
// with each endpoint.
const TypeBase = "https://driftguard.dev/problems/"

// Problem is a problem details body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Errors locate each payload problem by JSON pointer.
	Errors []Field `json:"errors,omitempty"`
}

// Field is one problem in a request's payload.
type Field struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// Write answers status with a problem of type TypeBase+kind. Errors are
// never cached.
func Write(w http.ResponseWriter, status int, kind, detail string, errs []Field) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{
		Type: TypeBase + kind, Title: http.StatusText(status), Status: status,
		Detail: detail, Errors: errs,
	})
}
