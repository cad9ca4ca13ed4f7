package safetensors

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// sampleLen is the number of bytes hashed at each of a tensor's three sample
// points (start, middle, end).
const sampleLen = 1024

// Fingerprint identifies a checkpoint: xxHash64 over config.json's bytes and,
// for every tensor in name order, its name, dtype, shape and the first,
// middle and last KiB of its data (all of it when shorter than 3 KiB). It
// reads a few pages per tensor, so a 16 GB checkpoint costs milliseconds,
// yet any fine-tune (which moves nearly every weight) changes it. The result
// is 16 lowercase hex digits. s must be open.
func Fingerprint(configJSON []byte, s *Set) string {
	if s.closed {
		panic("safetensors: Fingerprint of a closed Set")
	}
	h := xxhash.New()
	var num [8]byte
	putInt := func(v int64) {
		binary.LittleEndian.PutUint64(num[:], uint64(v))
		h.Write(num[:])
	}
	putBytes := func(b []byte) {
		putInt(int64(len(b)))
		h.Write(b)
	}
	putBytes([]byte("dlmcache.fingerprint/v1"))
	putBytes(configJSON)
	for _, name := range s.Names() {
		f := s.where[name]
		in := f.Header.Tensors[name]
		putBytes([]byte(name))
		putBytes([]byte(in.DType))
		putInt(int64(len(in.Shape)))
		for _, d := range in.Shape {
			putInt(int64(d))
		}
		data := f.bytes(in)
		if len(data) <= 3*sampleLen {
			putBytes(data)
			continue
		}
		mid := (len(data) - sampleLen) / 2
		putBytes(data[:sampleLen])
		putBytes(data[mid : mid+sampleLen])
		putBytes(data[len(data)-sampleLen:])
	}
	return fmt.Sprintf("%016x", h.Sum64())
}
