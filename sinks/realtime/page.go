package realtime

import (
	"embed"
	"io/fs"
	"net/http"
)

// pageFiles are the page at /: static HTML, JavaScript and CSS, embedded,
// with no build step and no external assets.
//
//go:embed page
var pageFiles embed.FS

// registerPage serves the page's files at / and below, under the page's
// policy with frame, its frame-ancestors directive.
func registerPage(mux *http.ServeMux, frame string) {
	files, _ := fs.Sub(pageFiles, "page")
	static := pageHeaders(http.FileServerFS(files), pagePolicy+"; "+frame)
	mux.Handle("GET /{$}", static)
	for _, name := range []string{"app.js", "compose.js", "style.css"} {
		mux.Handle("GET /"+name, static)
	}
}

// pageHeaders sets the page's policy and keeps browsers from caching an
// old page across a new binary.
func pageHeaders(h http.Handler, policy string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", policy)
		h.ServeHTTP(w, r)
	})
}
