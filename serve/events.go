package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// handleKVEvents serves the block store's KV events (GET /v1/kv_events) as
// newline-delimited JSON, one event per line, for cache-aware routers that
// track which replica holds which prefix blocks:
//
//	{"seq":12,"type":"stored","block_hash":"…","parent_hash":"…","token_count":16}
//
// ?since=SEQ returns the events after SEQ (default 0: every event the log
// still holds); ?wait=SECONDS (at most 60) holds the request until there
// is at least one. A router resumes from the last seq it applied. When the
// log no longer holds the events right after SEQ the answer is 410 Gone:
// the router must drop its index for this replica and start again from
// since=0 on a fresh server, or from the events it still gets, knowing it
// missed some. Without a block store (--store-blocks 0) the endpoint is 404.
//
// At most Config.MaxEventWaits long-polls are open at once (more get 429),
// a shutdown answers them at once, and the answer is written under
// --write-timeout: a client that does not read it loses its connection.
func (s *Server) handleKVEvents(w http.ResponseWriter, r *http.Request) {
	log := s.cfg.Events
	if log == nil {
		writeError(w, newAPIError(http.StatusNotFound, "invalid_request_error", "no_block_store", "",
			"this server keeps whole prefixes, not blocks: start it with --store-blocks 16 for KV events"))
		return
	}
	q := r.URL.Query()
	var since uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, badRequest(fmt.Sprintf("since %q: want a sequence number", v), "since"))
			return
		}
		since = n
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 0 || n > 60 {
			writeError(w, badRequest(fmt.Sprintf("wait %q: want seconds in 0…60", v), "wait"))
			return
		}
		wait = time.Duration(n * float64(time.Second))
	}
	events, gap, next := log.Since(since)
	if len(events) == 0 && wait > 0 && !s.closing.Load() {
		if n := s.eventWaits.Add(1); n > int64(s.cfg.MaxEventWaits) {
			s.eventWaits.Add(-1)
			w.Header().Set("Retry-After", "1")
			writeError(w, newAPIError(http.StatusTooManyRequests, "rate_limit_error", "too_many_waits", "wait",
				fmt.Sprintf("%d KV-event long-polls are open (the limit, --max-event-waits); retry later or poll without wait", s.cfg.MaxEventWaits)))
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-next:
		case <-t.C:
		case <-r.Context().Done():
		case <-s.draining:
		}
		t.Stop()
		s.eventWaits.Add(-1)
		events, gap, _ = log.Since(since)
	}
	if gap {
		writeError(w, newAPIError(http.StatusGone, "invalid_request_error", "events_dropped", "since",
			fmt.Sprintf("the events right after seq %d are no longer held (the log keeps the last ones only); rebuild this replica's index", since)))
		return
	}
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			writeError(w, internalError(err))
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Dlmcache-Seq", strconv.FormatUint(log.Seq(), 10))
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) //nolint:errcheck // unsupported: a recorder (tests)
	w.Write(body.Bytes())                                                              //nolint:errcheck // a client gone or too slow: nothing to answer
}

// DefaultMaxEventWaits is Config.MaxEventWaits's default.
const DefaultMaxEventWaits = 64
