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

// registerPage serves the page's files at / and below.
func registerPage(mux *http.ServeMux) {
	files, _ := fs.Sub(pageFiles, "page")
	static := http.FileServerFS(files)
	mux.Handle("GET /{$}", noStore(static))
	for _, name := range []string{"app.js", "compose.js", "style.css"} {
		mux.Handle("GET /"+name, noStore(static))
	}
}

// noStore keeps browsers from caching an old page across a new binary.
func noStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'")
		h.ServeHTTP(w, r)
	})
}
