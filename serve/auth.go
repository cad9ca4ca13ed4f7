package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
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

// allows reports whether r may be served and, for a request with a valid
// key, the key's digest (nil: no key needed or sent).
func (ks apiKeys) allows(r *http.Request) (bool, []byte) {
	if len(ks) == 0 {
		return true, nil
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return openPaths[r.URL.Path], nil
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	match := 0
	for _, k := range ks {
		match |= subtle.ConstantTimeCompare(sum[:], k[:])
	}
	if match != 1 {
		return openPaths[r.URL.Path], nil
	}
	return true, sum[:]
}

// With API keys, each key is its own cache namespace unless the server is
// configured to share (Config.SharedCacheAcrossKeys): a request's cache
// salt is its key's namespace joined with its cache_salt, so one key's
// requests never reuse, nor learn from prefix_hit whether the store holds,
// another key's prefixes, and no block hash can be computed without the
// key. The namespace is derived from the key's digest, never the key.

type keyNamespace struct{}

// namespaceOf is the cache namespace of a key with digest sum.
func namespaceOf(sum []byte) string {
	h := sha256.Sum256(append([]byte("dlmcache cache namespace\x00"), sum...))
	return hex.EncodeToString(h[:16])
}

// requestSalt is the salt a request's prefixes are stored under: its
// key's namespace (when keys isolate) joined with its cache_salt.
func requestSalt(ctx context.Context, cacheSalt string) string {
	ns, _ := ctx.Value(keyNamespace{}).(string)
	if ns == "" {
		return cacheSalt
	}
	return "key:" + ns + "\x00" + cacheSalt
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
