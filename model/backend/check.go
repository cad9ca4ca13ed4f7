package backend

import "fmt"

// The operands' rules of Backend's operations, one function each, for every
// backend to call before it runs one: nil, or an error that names the
// operation and the operands ("CopyRows: dst …, src …: column counts
// differ"). A backend panics with it (a mismatch is a programming error,
// see Backend), prefixed with its name. Operands print with %v, so a
// backend's tensors say what they are.

func shapeError(op, format string, args ...any) error {
	return fmt.Errorf("%s: %s", op, fmt.Sprintf(format, args...))
}

// CheckEmbed checks Embed's operands: dst [len(ids), table's cols], every
// id a row of table.
func CheckEmbed(dst, table Tensor, ids []int32) error {
	if dst.Rows() != len(ids) || dst.Cols() != table.Cols() {
		return shapeError("Embed", "dst %v for %d ids into table %v", dst, len(ids), table)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= table.Rows() {
			return shapeError("Embed", "id %d at %d outside table %v", id, i, table)
		}
	}
	return nil
}

// CheckRMSNorm checks RMSNorm's operands: dst shaped as x, w [1, x's cols].
func CheckRMSNorm(dst, x, w Tensor) error {
	if dst.Rows() != x.Rows() || dst.Cols() != x.Cols() || w.Rows() != 1 || w.Cols() != x.Cols() {
		return shapeError("RMSNorm", "dst %v, x %v, w %v", dst, x, w)
	}
	return nil
}

// CheckMatMul checks MatMul's operands: x [n, in], w [out, in], dst [n, out].
func CheckMatMul(dst, x, w Tensor) error {
	if w.Cols() != x.Cols() || dst.Rows() != x.Rows() || dst.Cols() != w.Rows() {
		return shapeError("MatMul", "dst %v = x %v · wᵀ with w %v", dst, x, w)
	}
	return nil
}

// CheckRoPE checks RoPE's operands: an even headDim > 0 that divides x's
// cols, a position for each row of x.
func CheckRoPE(x Tensor, pos []int32, headDim int) error {
	if headDim <= 0 || headDim%2 != 0 || x.Cols()%headDim != 0 || len(pos) != x.Rows() {
		return shapeError("RoPE", "x %v, %d positions, headDim %d", x, len(pos), headDim)
	}
	return nil
}

// CheckAttention checks Attention's operands (op names the operation the
// caller runs: Attention, AttentionBatch, …) and returns the head size:
// nHeads a multiple of nKVHeads that divides q's cols, k and v
// [nk, nKVHeads·hd], dst shaped as q.
func CheckAttention(op string, dst, q, k, v Tensor, nHeads, nKVHeads int) (headDim int, err error) {
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || q.Cols()%nHeads != 0 {
		return 0, shapeError(op, "q %v with %d heads, %d kv heads", q, nHeads, nKVHeads)
	}
	hd := q.Cols() / nHeads
	if k.Cols() != nKVHeads*hd || v.Cols() != k.Cols() || v.Rows() != k.Rows() || dst.Rows() != q.Rows() || dst.Cols() != q.Cols() {
		return 0, shapeError(op, "dst %v, q %v, k %v, v %v, %d heads, %d kv heads", dst, q, k, v, nHeads, nKVHeads)
	}
	return hd, nil
}

// CheckSiLUMul checks SiLUMul's operands: dst, gate and up of one shape.
func CheckSiLUMul(dst, gate, up Tensor) error {
	if dst.Rows() != gate.Rows() || dst.Cols() != gate.Cols() || up.Rows() != gate.Rows() || up.Cols() != gate.Cols() {
		return shapeError("SiLUMul", "dst %v, gate %v, up %v", dst, gate, up)
	}
	return nil
}

// CheckAdd checks Add's operands: dst and x of one shape.
func CheckAdd(dst, x Tensor) error {
	if dst.Rows() != x.Rows() || dst.Cols() != x.Cols() {
		return shapeError("Add", "dst %v, x %v", dst, x)
	}
	return nil
}

// CheckCopyRows checks CopyRows's operands and returns how many rows it
// copies: one column count; index lists of one length where both are
// given (a nil list is 0, 1, 2, …; both nil copy min(rows) rows); every
// index inside its tensor.
func CheckCopyRows(dst Tensor, dstRows []int32, src Tensor, srcRows []int32) (n int, err error) {
	if dst.Cols() != src.Cols() {
		return 0, shapeError("CopyRows", "dst %v, src %v: column counts differ", dst, src)
	}
	switch {
	case dstRows == nil && srcRows == nil:
		n = min(dst.Rows(), src.Rows())
	case dstRows == nil:
		n = len(srcRows)
	case srcRows == nil:
		n = len(dstRows)
	default:
		if len(dstRows) != len(srcRows) {
			return 0, shapeError("CopyRows", "%d destination rows for %d source rows", len(dstRows), len(srcRows))
		}
		n = len(dstRows)
	}
	for _, c := range []struct {
		what string
		idx  []int32
		rows int
	}{{"dst", dstRows, dst.Rows()}, {"src", srcRows, src.Rows()}} {
		if c.idx == nil {
			if n > c.rows {
				return 0, shapeError("CopyRows", "%d rows do not fit %s with %d rows", n, c.what, c.rows)
			}
			continue
		}
		for i, r := range c.idx {
			if r < 0 || int(r) >= c.rows {
				return 0, shapeError("CopyRows", "%s row %d at %d outside [0, %d)", c.what, r, i, c.rows)
			}
		}
	}
	return n, nil
}

// CheckFromHost checks FromHost's operands: rows and cols not negative,
// rows×cols values.
func CheckFromHost(rows, cols, values int) error {
	if rows < 0 || cols < 0 || values != rows*cols {
		return shapeError("FromHost", "%d values for shape [%d, %d]", values, rows, cols)
	}
	return nil
}

// HostDst is ToHost's destination for t: dst, or a new slice when dst is
// nil; an error when dst does not hold t's rows×cols values.
func HostDst(t Tensor, dst []float32) ([]float32, error) {
	n := t.Rows() * t.Cols()
	if dst == nil {
		dst = make([]float32, n)
	}
	if len(dst) != n {
		return nil, shapeError("ToHost", "dst has %d values for %v", len(dst), t)
	}
	return dst, nil
}
