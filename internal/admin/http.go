package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/telemetry"
)

// Route is an admin endpoint: a net/http pattern ("GET
// /admin/v1/streams/{stream}/keys/{key}") and its handler, served behind
// the admin token like the actions. Other admin tools mount theirs with
// Mount.
type Route struct {
	Pattern string
	Handler http.Handler
}

// Token is one accepted admin bearer token and the subject it names, who
// is recorded as the requester of what it asks.
type Token struct {
	Subject string
	// Secret is the bearer token itself.
	Secret string
}

// ParseTokens reads telemetry.admin_token: comma-separated tokens, each
// `subject:secret` or a bare secret (subject "admin"). Each secret must
// be at least MinTokenBytes long.
func ParseTokens(setting string) ([]Token, error) {
	var tokens []Token
	for _, part := range strings.Split(setting, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		t := Token{Subject: "admin", Secret: part}
		if subject, secret, ok := strings.Cut(part, ":"); ok {
			t = Token{Subject: strings.TrimSpace(subject), Secret: strings.TrimSpace(secret)}
		}
		if t.Subject == "" {
			return nil, errors.New("a token with an empty subject (write subject:secret)")
		}
		if len(t.Secret) < MinTokenBytes {
			return nil, fmt.Errorf("the token of %q is %d bytes, under %d", t.Subject, len(t.Secret), MinTokenBytes)
		}
		tokens = append(tokens, t)
	}
	return tokens, nil
}

// MinTokenBytes is the shortest admin token accepted.
const MinTokenBytes = 24

// ServerOptions configure the admin endpoints.
type ServerOptions struct {
	// Tokens are the accepted bearer tokens; none: Mount mounts nothing.
	Tokens []Token
	// Issuer issues the actions.
	Issuer *Issuer
	// Wait bounds how long a request waits for the decision; default
	// DefaultWait.
	Wait time.Duration
	// Logger receives the audit lines; nil discards.
	Logger *slog.Logger
}

// ActionPattern is the endpoint of the operator actions.
const ActionPattern = "POST /admin/v1/streams/{stream}/keys/{key}/actions/{action}"

// Mount serves the admin endpoints on mux, the operations port's: the
// actions and the extra routes, each behind the admin token. Without a
// token it mounts nothing, and reports false: the endpoints are off.
func Mount(mux *http.ServeMux, opts ServerOptions, extra ...Route) bool {
	if len(opts.Tokens) == 0 {
		return false
	}
	a := &server{opts: opts, log: telemetry.OrDiscard(opts.Logger)}
	if a.opts.Wait <= 0 {
		a.opts.Wait = DefaultWait
	}
	routes := append([]Route{{ActionPattern, http.HandlerFunc(a.action)}}, extra...)
	for _, r := range routes {
		mux.Handle(r.Pattern, a.authenticated(r.Handler))
	}
	return true
}

type server struct {
	opts ServerOptions
	log  *slog.Logger
}

type subjectKey struct{}

// Subject is who the admin token of r names, for the handlers behind it.
func Subject(r *http.Request) string {
	s, _ := r.Context().Value(subjectKey{}).(string)
	return s
}

// authenticated lets through a request with one of the tokens, with its
// subject in the context; any other gets 401.
func (a *server) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		subject := ""
		if ok {
			// Hashes of equal length, compared in constant time, so
			// neither a token's bytes nor its length leak through timing.
			g := sha256.Sum256([]byte(given))
			for _, t := range a.opts.Tokens {
				want := sha256.Sum256([]byte(t.Secret))
				if subtle.ConstantTimeCompare(g[:], want[:]) == 1 {
					subject = t.Subject
				}
			}
		}
		if subject == "" {
			a.log.Warn("admin request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "token_given", ok)
			w.Header().Set("WWW-Authenticate", `Bearer realm="driftguard-admin"`)
			problem.Write(w, http.StatusUnauthorized, "admin_token", "an admin token is required: Authorization: Bearer <telemetry.admin_token>", nil)
			return
		}
		next.ServeHTTP(w, r.WithContext(contextWithSubject(r, subject)))
	})
}

// actionBody is the optional JSON body of an action request.
type actionBody struct {
	Reason  string `json:"reason"`
	Confirm bool   `json:"confirm"`
}

// action issues one operator action for the token's subject and answers
// with its decision: 200 actioned, 409 refused (rejected or duplicate),
// 202 pending.
func (a *server) action(w http.ResponseWriter, r *http.Request) {
	var body actionBody
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			problem.Write(w, http.StatusBadRequest, "json", "the body must be {\"reason\": string, \"confirm\": bool}: "+err.Error(), nil)
			return
		}
	}
	req := Request{Stream: r.PathValue("stream"), Key: r.PathValue("key"), Action: record.ActionName(r.PathValue("action")),
		RequestedBy: Subject(r), Reason: body.Reason, Confirm: body.Confirm}
	if err := a.opts.Issuer.Check(req); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, ErrUnknownStream) {
			status = http.StatusNotFound
		}
		problem.Write(w, status, "action", err.Error(), nil)
		return
	}
	res, err := a.opts.Issuer.Issue(r.Context(), req, a.opts.Wait)
	if err != nil {
		a.log.Error("admin action not written", "stream", req.Stream, "key", req.Key, "action", req.Action, "requested_by", req.RequestedBy, "err", err)
		problem.Write(w, http.StatusServiceUnavailable, "unavailable", "the action was not written: "+err.Error(), nil)
		return
	}
	Audit(a.log, "http", req, res)
	status := http.StatusOK
	switch {
	case res.Pending:
		status = http.StatusAccepted
	case res.Outcome() != record.Actioned:
		status = http.StatusConflict
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(res)
}

// Audit logs an issued action and what became of it: the log line beside
// the outcome rows, which name the action and requester too.
func Audit(log *slog.Logger, via string, req Request, res *Result) {
	attrs := []any{"via", via, "stream", req.Stream, "key", req.Key, "action", req.Action, "requested_by", req.RequestedBy,
		"reason", req.Reason, "confirm", req.Confirm, "event_id", res.EventID, "partition", res.Partition, "offset", res.Offset}
	if res.Pending {
		log.Info("admin action pending", attrs...)
		return
	}
	first := res.Decisions[0]
	log.Info("admin action decided", append(attrs, "outcome", first.Outcome, "why", first.Reason, "decisions", len(res.Decisions))...)
}

func contextWithSubject(r *http.Request, subject string) context.Context {
	return context.WithValue(r.Context(), subjectKey{}, subject)
}
