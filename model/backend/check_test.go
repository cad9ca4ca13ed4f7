package backend

import (
	"fmt"
	"strings"
	"testing"
)

// shape is a Tensor of no storage, for the operand checks.
type shape struct{ r, c int }

func (s shape) Rows() int      { return s.r }
func (s shape) Cols() int      { return s.c }
func (s shape) String() string { return fmt.Sprintf("[%d, %d]", s.r, s.c) }

// TestChecksAcceptWellShapedOperandsAndNameTheOperationOtherwise: each
// check passes the shapes its operation's contract allows and rejects
// each way of breaking it with an error that names the operation.
func TestChecksAcceptWellShapedOperandsAndNameTheOperationOtherwise(t *testing.T) {
	type tc struct {
		name string
		err  error
		want string // "" for no error, else a part of the message
	}
	attn := func(dst, q, k, v shape, h, kv int) error {
		_, err := CheckAttention("Attention", dst, q, k, v, h, kv)
		return err
	}
	cp := func(dst shape, dr []int32, src shape, sr []int32) error {
		_, err := CheckCopyRows(dst, dr, src, sr)
		return err
	}
	hostDst := func(t shape, dst []float32) error {
		got, err := HostDst(t, dst)
		if err == nil && (len(got) != t.r*t.c || dst != nil && &got[0] != &dst[0]) {
			return fmt.Errorf("HostDst gave %d values (%p), want %d (dst %p or a new slice)", len(got), got, t.r*t.c, dst)
		}
		return err
	}
	for _, c := range []tc{
		{"embed ok", CheckEmbed(shape{2, 4}, shape{10, 4}, []int32{0, 9}), ""},
		{"embed rows", CheckEmbed(shape{3, 4}, shape{10, 4}, []int32{0, 9}), "Embed: dst [3, 4] for 2 ids into table [10, 4]"},
		{"embed cols", CheckEmbed(shape{2, 5}, shape{10, 4}, []int32{0, 9}), "Embed: dst"},
		{"embed id high", CheckEmbed(shape{2, 4}, shape{10, 4}, []int32{0, 10}), "Embed: id 10 at 1 outside table [10, 4]"},
		{"embed id negative", CheckEmbed(shape{1, 4}, shape{10, 4}, []int32{-1}), "Embed: id -1 at 0"},
		{"rmsnorm ok", CheckRMSNorm(shape{3, 8}, shape{3, 8}, shape{1, 8}), ""},
		{"rmsnorm w rows", CheckRMSNorm(shape{3, 8}, shape{3, 8}, shape{2, 8}), "RMSNorm: dst [3, 8], x [3, 8], w [2, 8]"},
		{"rmsnorm dst", CheckRMSNorm(shape{3, 7}, shape{3, 8}, shape{1, 8}), "RMSNorm"},
		{"matmul ok", CheckMatMul(shape{5, 3}, shape{5, 8}, shape{3, 8}), ""},
		{"matmul inner", CheckMatMul(shape{5, 3}, shape{5, 8}, shape{3, 7}), "MatMul: dst [5, 3] = x [5, 8] · wᵀ with w [3, 7]"},
		{"matmul out", CheckMatMul(shape{5, 4}, shape{5, 8}, shape{3, 8}), "MatMul"},
		{"rope ok", CheckRoPE(shape{2, 16}, []int32{0, 1}, 8), ""},
		{"rope odd head", CheckRoPE(shape{2, 14}, []int32{0, 1}, 7), "RoPE: x [2, 14], 2 positions, headDim 7"},
		{"rope zero head", CheckRoPE(shape{2, 16}, []int32{0, 1}, 0), "RoPE"},
		{"rope positions", CheckRoPE(shape{2, 16}, []int32{0}, 8), "RoPE"},
		{"rope not whole heads", CheckRoPE(shape{2, 12}, []int32{0, 1}, 8), "RoPE"},
		{"attention ok", attn(shape{4, 16}, shape{4, 16}, shape{6, 8}, shape{6, 8}, 4, 2), ""},
		{"attention heads", attn(shape{4, 16}, shape{4, 16}, shape{6, 8}, shape{6, 8}, 3, 2), "Attention: q [4, 16] with 3 heads, 2 kv heads"},
		{"attention no heads", attn(shape{4, 16}, shape{4, 16}, shape{6, 8}, shape{6, 8}, 0, 0), "Attention: q"},
		{"attention v rows", attn(shape{4, 16}, shape{4, 16}, shape{6, 8}, shape{5, 8}, 4, 2), "Attention: dst [4, 16], q [4, 16], k [6, 8], v [5, 8], 4 heads, 2 kv heads"},
		{"attention k cols", attn(shape{4, 16}, shape{4, 16}, shape{6, 12}, shape{6, 12}, 4, 2), "Attention: dst"},
		{"attention dst", attn(shape{3, 16}, shape{4, 16}, shape{6, 8}, shape{6, 8}, 4, 2), "Attention: dst"},
		{"silumul ok", CheckSiLUMul(shape{2, 3}, shape{2, 3}, shape{2, 3}), ""},
		{"silumul up", CheckSiLUMul(shape{2, 3}, shape{2, 3}, shape{2, 4}), "SiLUMul: dst [2, 3], gate [2, 3], up [2, 4]"},
		{"add ok", CheckAdd(shape{2, 3}, shape{2, 3}), ""},
		{"add", CheckAdd(shape{2, 3}, shape{3, 2}), "Add: dst [2, 3], x [3, 2]"},
		{"copyrows both nil", cp(shape{5, 4}, nil, shape{3, 4}, nil), ""},
		{"copyrows cols", cp(shape{5, 4}, nil, shape{3, 5}, nil), "CopyRows: dst [5, 4], src [3, 5]: column counts differ"},
		{"copyrows lengths", cp(shape{5, 4}, []int32{0, 1}, shape{3, 4}, []int32{0}), "CopyRows: 2 destination rows for 1 source rows"},
		{"copyrows dst index", cp(shape{5, 4}, []int32{5}, shape{3, 4}, []int32{0}), "CopyRows: dst row 5 at 0 outside [0, 5)"},
		{"copyrows src index", cp(shape{5, 4}, []int32{0, 1}, shape{3, 4}, []int32{2, -1}), "CopyRows: src row -1 at 1 outside [0, 3)"},
		{"copyrows src too short", cp(shape{5, 4}, []int32{0, 1, 2, 3}, shape{3, 4}, nil), "CopyRows: 4 rows do not fit src with 3 rows"},
		{"copyrows dst too short", cp(shape{2, 4}, nil, shape{3, 4}, []int32{0, 1, 2}), "CopyRows: 3 rows do not fit dst with 2 rows"},
		{"fromhost ok", CheckFromHost(2, 3, 6), ""},
		{"fromhost empty", CheckFromHost(0, 3, 0), ""},
		{"fromhost values", CheckFromHost(2, 3, 5), "FromHost: 5 values for shape [2, 3]"},
		{"fromhost negative", CheckFromHost(-2, -3, 6), "FromHost: 6 values for shape [-2, -3]"},
		{"tohost ok", hostDst(shape{2, 3}, make([]float32, 6)), ""},
		{"tohost nil", hostDst(shape{2, 3}, nil), ""},
		{"tohost short", hostDst(shape{2, 3}, make([]float32, 5)), "ToHost: dst has 5 values for [2, 3]"},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: %v, want no error", c.name, c.err)
		case c.want != "" && c.err == nil:
			t.Errorf("%s: no error, want %q", c.name, c.want)
		case c.want != "" && !strings.Contains(c.err.Error(), c.want):
			t.Errorf("%s: %q, want it to contain %q", c.name, c.err, c.want)
		}
	}
}

// TestCheckCopyRowsCountsTheRowsCopied: a nil list is 0, 1, 2, …, so the
// count is the other list's length, or min(rows) when both are nil.
func TestCheckCopyRowsCountsTheRowsCopied(t *testing.T) {
	for _, c := range []struct {
		dr, sr []int32
		want   int
	}{
		{nil, nil, 3},
		{[]int32{4, 0}, nil, 2},
		{nil, []int32{2, 2, 1}, 3},
		{[]int32{1, 1}, []int32{0, 2}, 2},
		{[]int32{}, []int32{}, 0},
	} {
		n, err := CheckCopyRows(shape{5, 4}, c.dr, shape{3, 4}, c.sr)
		if err != nil || n != c.want {
			t.Errorf("dst rows %v, src rows %v: %d, %v; want %d", c.dr, c.sr, n, err, c.want)
		}
	}
	if n, err := CheckAttention("AttentionBatch", shape{4, 16}, shape{4, 16}, shape{6, 8}, shape{6, 8}, 4, 2); err != nil || n != 4 {
		t.Errorf("head size %d, %v; want 4", n, err)
	}
}
