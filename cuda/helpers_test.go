package cuda

import (
	"math"
	"slices"
	"testing"
)

func TestBucketRoundsUpByAtMostAQuarter(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{1, 256}, {256, 256}, {257, 320}, {512, 512}, {513, 640}, {1000, 1024},
		{3 << 20, 3 << 20}, {(3 << 20) + 1, (3 << 20) + (512 << 10)},
	} {
		got := bucket(c.n)
		if got != c.want {
			t.Errorf("bucket(%d) = %d, want %d", c.n, got, c.want)
		}
		if got < c.n || float64(got) > 1.25*float64(c.n)+256 {
			t.Errorf("bucket(%d) = %d wastes too much", c.n, got)
		}
	}
}

func TestLastCopies(t *testing.T) {
	for _, c := range []struct {
		name             string
		dst, src         []int32
		n                int
		wantDst, wantSrc []int32
		wantN            int
	}{
		{"no repeat", []int32{0, 2, 1}, []int32{5, 6, 7}, 3, []int32{0, 2, 1}, []int32{5, 6, 7}, 3},
		{"nil dst", nil, []int32{1, 1}, 2, nil, []int32{1, 1}, 2},
		{"repeat", []int32{3, 1, 3}, []int32{0, 1, 2}, 3, []int32{3, 1}, []int32{2, 1}, 2},
		{"repeat, nil src", []int32{4, 4, 4}, nil, 3, []int32{4}, []int32{2}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, s, n := lastCopies(c.dst, c.src, c.n)
			if !slices.Equal(d, c.wantDst) || !slices.Equal(s, c.wantSrc) || n != c.wantN {
				t.Errorf("got %v %v %d, want %v %v %d", d, s, n, c.wantDst, c.wantSrc, c.wantN)
			}
		})
	}
}

func TestF16ToF32(t *testing.T) {
	for _, c := range []struct {
		h    uint16
		want float32
	}{
		{0x0000, 0}, {0x3c00, 1}, {0xc000, -2}, {0x3555, 0.33325195},
		{0x7bff, 65504}, {0x0001, 5.9604645e-08}, {0x03ff, 6.097555e-05},
		{0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))},
	} {
		if got := f16ToF32(c.h); got != c.want {
			t.Errorf("f16ToF32(%#04x) = %g, want %g", c.h, got, c.want)
		}
	}
	if got := f16ToF32(0x7e00); !math.IsNaN(float64(got)) {
		t.Errorf("f16ToF32(NaN) = %g", got)
	}
	if got := f16ToF32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("f16ToF32(-0) = %g", got)
	}
}
