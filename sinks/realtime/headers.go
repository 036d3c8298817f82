package realtime

import (
	"net/http"
	"strings"
)

// pagePolicy is the page's Content-Security-Policy but frame-ancestors: it
// allows exactly what the page loads, its own scripts and stylesheet
// (no inline script or style), fetch() to the bridge for the streams and
// sends, and the data: icon. base-uri and form-action keep an injected
// tag from sending the page's links or its composer elsewhere.
const pagePolicy = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'"

// apiPolicy is the Content-Security-Policy of every other response: JSON,
// SSE and problems load nothing, so a browser shown one renders it inert.
const apiPolicy = "default-src 'none'"

// frameAncestors is the frame-ancestors directive of bridge.frame_ancestors;
// none configured (a configuration without defaults) is 'none'.
func frameAncestors(sources []string) string {
	if len(sources) == 0 {
		return "frame-ancestors 'none'"
	}
	return "frame-ancestors " + strings.Join(sources, " ")
}

// securityHeaders sets the browser hardening headers on every response of
// h: the API's policy (the page's handler replaces it with the page's),
// no MIME sniffing, so that a JSON answer carrying a client's text is never
// taken for HTML or script, and no Referer, so that the URL of the page,
// with a token in its fragment or query, is never sent elsewhere.
func securityHeaders(h http.Handler, frame string) http.Handler {
	policy := apiPolicy + "; " + frame
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Security-Policy", policy)
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}
