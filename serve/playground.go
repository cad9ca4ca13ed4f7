package serve

import (
	_ "embed"
	"net/http"
)

// playgroundHTML is the page served at GET /: plain HTML and JavaScript,
// embedded in the binary (no build step). It sends a chat request with the
// canvas-streaming extension, shows the answer canvas unmasking step by
// step, the request's dlmcache statistics, and live /metrics.
//
//go:embed playground/index.html
var playgroundHTML []byte

func (s *Server) handlePlayground(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(playgroundHTML)
}
