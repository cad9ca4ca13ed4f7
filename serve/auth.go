package serve

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// API keys, as vLLM's and llama.cpp's servers take them: with keys
// configured (Config.APIKeys), every request but the health checks
// (/health, /healthz) and the playground page (GET /) must carry one as
// "Authorization: Bearer KEY"; others get 401 in OpenAI's error shape.
// Keys are kept as SHA-256 digests and compared in constant time, every
// key each time, so neither a key's length nor which key matched shows in
// the timing.

// openPaths are served without a key.
var openPaths = map[string]bool{"/health": true, "/healthz": true, "/": true}

type apiKeys [][sha256.Size]byte

func newAPIKeys(keys []string) apiKeys {
	var out apiKeys
	for _, k := range keys {
		out = append(out, sha256.Sum256([]byte(k)))
	}
	return out
}

// allows reports whether r may be served.
func (ks apiKeys) allows(r *http.Request) bool {
	if len(ks) == 0 || openPaths[r.URL.Path] {
		return true
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := 0
	for _, k := range ks {
		match |= subtle.ConstantTimeCompare(sum[:], k[:])
	}
	return match == 1
}

// unauthorized answers a request without a valid key.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	w.Header().Set("WWW-Authenticate", `Bearer realm="dlmcache"`)
	msg := "a valid API key is required: send it as \"Authorization: Bearer KEY\""
	if r.Header.Get("Authorization") != "" {
		msg = "the API key is not valid"
	}
	writeError(w, newAPIError(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "", msg))
	s.met.unauthorized.Inc()
	s.logRequest(r, http.StatusUnauthorized, s.cfg.Now().Sub(start), "error=unauthorized")
}
