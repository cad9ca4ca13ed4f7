package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's bytes_to_unicode table: every byte maps to a
// printable rune, so that byte strings can be stored as (JSON) text. The
// printable Latin-1 bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' map to themselves;
// the other 68 bytes map to U+0100, U+0101, ... in byte order.
var byteToRune [256]rune

// runeToByte inverts byteToRune.
var runeToByte map[rune]byte

func init() {
	runeToByte = make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelMap maps the bytes of s through byteToRune.
func byteLevelMap(s string) string {
	buf := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteToRune[s[i]])
	}
	return string(buf)
}

// byteLevelUnmap appends to dst the bytes that the byte-level token tok
// stands for. As the Hugging Face ByteLevel decoder does, a token holding a
// rune outside the byte alphabet is copied as its raw UTF-8 bytes.
func byteLevelUnmap(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// byteLevelUnmapString inverts byteLevelMap; a rune outside the byte
// alphabet is kept as its UTF-8 bytes.
func byteLevelUnmapString(s string) string {
	buf := make([]byte, 0, len(s))
	for _, r := range s {
		if b, ok := runeToByte[r]; ok {
			buf = append(buf, b)
		} else {
			buf = utf8.AppendRune(buf, r)
		}
	}
	return string(buf)
}
