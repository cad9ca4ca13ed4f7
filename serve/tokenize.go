package serve

import (
	"fmt"
	"net/http"

	"github.com/dlmcache/dlmcache/cache"
)

// tokenizeRequest is vLLM's: a chat (messages, rendered under the model's
// chat template with the generation prompt, as /v1/chat/completions
// renders it) or a prompt (BOS and the text, as /v1/completions encodes
// it; add_special_tokens false: the text alone).
type tokenizeRequest struct {
	Model            string      `json:"model"`
	Prompt           *string     `json:"prompt"`
	Messages         messageList `json:"messages"`
	AddSpecialTokens *bool       `json:"add_special_tokens"`
	ReturnTokenStrs  bool        `json:"return_token_strs"`
	// CacheSalt is accepted for symmetry with the generation requests; it
	// changes no token.
	CacheSalt string `json:"cache_salt"`
}

type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int32  `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
	// PrefixTokens is a dlmcache extra: the shared prefix's length (the
	// system turn, or a block store's earlier turns), and BlockSize the
	// block store's block length (absent without one).
	PrefixTokens int `json:"prefix_tokens"`
	BlockSize    int `json:"block_size,omitempty"`
}

// handleTokenize is vLLM's POST /tokenize: a request's token ids as this
// server would generate from them, so that a router or client can hash a
// request's prefix blocks without a tokenizer of its own.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if e := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); e != nil {
		writeError(w, e)
		return
	}
	tok := s.cfg.Model.Tokenizer
	var ids []int32
	var m int
	switch {
	case req.Messages != nil && req.Prompt != nil:
		writeError(w, badRequest("send messages (a chat) or prompt (a completion), not both", "messages"))
		return
	case req.Messages != nil:
		_, blocks := cache.StoreOf(s.cfg.Method).(*cache.BlockStore)
		var err error
		if ids, m, _, err = encodeConversation(r.Context(), tok, req.Messages, blocks); err != nil {
			writeError(w, asAPIError(err))
			return
		}
	case req.Prompt != nil:
		if req.AddSpecialTokens != nil && !*req.AddSpecialTokens {
			ids = tok.Encode(*req.Prompt)
			break
		}
		var err error
		if ids, m, err = encodeCompletion(tok, "", *req.Prompt); err != nil {
			writeError(w, asAPIError(err))
			return
		}
	default:
		writeError(w, badRequest("messages or prompt is required", "prompt"))
		return
	}
	resp := tokenizeResponse{Count: len(ids), MaxModelLen: s.cfg.MaxContext, Tokens: ids, PrefixTokens: m}
	if resp.Tokens == nil {
		resp.Tokens = []int32{}
	}
	if bs, ok := cache.StoreOf(s.cfg.Method).(*cache.BlockStore); ok {
		resp.BlockSize = bs.BlockSize()
	}
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i] = tok.Decode([]int32{id})
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

type detokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int64 `json:"tokens"`
}

// handleDetokenize is vLLM's POST /detokenize: token ids back to text
// (special tokens included).
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if e := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Tokens == nil {
		writeError(w, badRequest("tokens is required", "tokens"))
		return
	}
	tok := s.cfg.Model.Tokenizer
	ids := make([]int32, len(req.Tokens))
	for i, t := range req.Tokens {
		if t < 0 || t >= int64(tok.VocabSize()) {
			writeError(w, badRequest(fmt.Sprintf("tokens[%d]: %d is not a token id of this model (0…%d)", i, t, tok.VocabSize()-1), "tokens"))
			return
		}
		ids[i] = int32(t)
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": tok.Decode(ids)})
}

// handleResetPrefixCache is vLLM's POST /reset_prefix_cache: the block
// store's blocks are all removed (one AllBlocksCleared event); requests
// in flight keep the blocks they hold. Served with Config.ResetPrefixCache
// only; without a block store it is 404.
func (s *Server) handleResetPrefixCache(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.ResetPrefixCache {
		writeError(w, newAPIError(http.StatusNotFound, "invalid_request_error", "reset_disabled", "",
			"POST /reset_prefix_cache clears every tenant's cached blocks: start the server with --reset-prefix-cache to serve it"))
		return
	}
	bs, ok := cache.StoreOf(s.cfg.Method).(*cache.BlockStore)
	if !ok {
		writeError(w, newAPIError(http.StatusNotFound, "invalid_request_error", "no_block_store", "",
			"this server keeps no block store (--store-blocks N): nothing to reset"))
		return
	}
	n := bs.Clear()
	writeJSON(w, http.StatusOK, map[string]any{"cleared_blocks": n})
}
