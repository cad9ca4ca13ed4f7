// Package safetensors reads and writes checkpoints in the safetensors format
// (https://github.com/huggingface/safetensors) as Hugging Face stores them:
// one model.safetensors, or shards listed in model.safetensors.index.json.
//
// A safetensors file is
//
//	[8 bytes: N, little-endian uint64][N bytes: JSON header][data region]
//
// where the header maps each tensor name to its dtype, shape and
// data_offsets [begin, end) relative to the start of the data region, plus
// an optional "__metadata__" object of string values. ParseHeader validates
// all of it (length bound, JSON, dtypes, shapes, offsets within the data
// region, byte counts equal to numel·dtype size, no overlaps) so that the
// rest of the program can slice the data region without further checks.
//
// Open memory-maps every file read-only; Tensor hands out slices of the
// mapping, valid until Set.Close. Only F32, F16 and BF16 tensors can be
// handed to a backend; the other dtypes are recognised (and checked) but
// refused by Tensor with an error that names the file, tensor and dtype.
//
// Fingerprint identifies a checkpoint cheaply (config.json, every tensor's
// name, dtype, shape and a few KiB sampled from its bytes), so that a table
// calibrated on one fine-tune is not silently applied to another of the same
// shape.
//
// Write produces a file byte-compatible with the reference implementation
// (header padded with spaces to a multiple of 8 bytes), atomically. The
// half-precision helpers (BF16ToF32, F16ToF32, F32ToBF16, F32ToF16) convert
// with round-to-nearest-even and keep infinities, NaNs and subnormals.
package safetensors
