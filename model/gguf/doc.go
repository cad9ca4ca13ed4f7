// Package gguf reads and writes GGUF files, llama.cpp's model format.
//
// Open maps a file read-only (internal/mmapfile) and parses its header:
// versions 2 and 3, little-endian, every metadata value type (arrays nested
// included), tensor infos with ggml's types and shapes, and general.alignment
// (default 32). Every count, length, offset and extent is checked against
// the file's size before use, so a truncated or hostile file fails with an
// error that says where, not with a crash. Tensor data are slices of the
// mapping (File.Data), valid until Close.
//
// Write produces the layout of gguf-py's GGUFWriter: header, metadata and
// tensor infos in the order given, tensor data padded to the alignment,
// streamed one tensor at a time and renamed into place when complete.
//
// Codecs: F32, F16 and BF16 (through model/safetensors' conversions) and
// Q8_0, whose quantizer matches ggml's reference (quantize_row_q8_0_ref)
// and gguf-py bit for bit. The other ggml types are sized and named, so a
// file holding them opens and its tensors can be listed, but ToF32 refuses
// them.
//
// Vocab is the tokenizer llama.cpp's converter stores (tokenizer.ggml.model
// "gpt2": tokens, token types, merges, the pre-tokenizer's name, special
// ids, tokenizer.chat_template); TokenizerJSON turns it into the Hugging
// Face files model/tokenizer reads, and VocabFromHF goes the other way.
//
// Why not a library: the one maintained Go GGUF module at hand,
// github.com/gpustack/gguf-parser-go, parses headers to estimate memory
// use (it reads through buffered or remote readers, not a memory mapping
// handed to the caller), writes nothing and brings its own dependency tree;
// dlmcache needs the tensor bytes in place for its backends and a writer
// for `dlmcache convert`, which together are this small package.
//
// The LLaDA-specific mapping — llama.cpp's tensor names and metadata keys,
// the q/k row permutation its converter applies — lives in package
// model/load (gguf_llada.go), beside the safetensors loader it mirrors.
package gguf
