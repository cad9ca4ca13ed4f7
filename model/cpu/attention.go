package cpu

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/dlmcache/dlmcache/model/backend"
)

// maxAttnBlock is the most query rows one attention task handles. Its
// score block [rows, nk] is reused at once by the second product. Measured
// at nq = nk = 512 (best of 5, GFLOP/s on 2 threads, h8/hd64 and h16/hd128):
// 32 rows 93/104, 64 rows 132/100, 128 rows 140/127, 256 rows 146/134, 512
// rows 147/126: OpenBLAS wants tall blocks; more rows than 256 gain nothing
// and cost balance between the goroutines. 240: whole row blocks of both
// fused kernels (24 = 6·4 = 8·3).
const maxAttnBlock = 240

// maxAttnPack is the most floats the fused kernel's kᵀ and v layouts take
// at once (16 MB) for a batch's attentions (AttentionBatch) and the
// layouts kept with K/V (NewKV); more, and they run as Attention does.
var maxAttnPack = 4 << 20

// attnGroupPack is the most floats one Attention lays its kv heads out in
// at once (1 MB, or one kv head's where that is more): it lays them out a
// group at a time, one job of the C team a group. With every head in one
// layout, l16-d2048's 16 heads over 256 keys took 4 MB; in groups of 4 the
// attention took 2–4% longer (its shape at 256 rows, 2 threads, Zen 5:
// 1.48–1.53 ms against 1.44–1.45), a step 0.2%, for 3 MB less peak
// memory.
var attnGroupPack = 1 << 18

// Attention: bidirectional softmax attention, scaled by 1/sqrt(headDim).
// q [nq, nHeads*hd], k and v [nk, nKVHeads*hd], dst [nq, nHeads*hd];
// query head h reads kv head h/(nHeads/nKVHeads).
//
// The work is split into tasks of (head, block of up to maxAttnBlock
// query rows) taken in order. Where the CPU has AVX-512F or AVX2+FMA (and
// the backend's attn kernel is on, the default), the tasks are one job of
// the C team (team.c), each running the fused kernel (attn_rows,
// attn_rows2 in attn.c): eight (AVX-512) or six (AVX2) query rows at
// a time, their scores against kᵀ (laid out with v once per kv head, a
// task of the same job that its heads' tasks wait for), the softmax and
// the product with v, with those score rows kept in L1.
// Otherwise goroutines take the tasks, and a task computes its scores S = scale·q_h·k_hᵀ with one sgemm
// reading q and k in place (leading dimensions, no copies), turns each row
// of S into e^(s−max), multiplies by v_h with a second sgemm straight into
// dst, and divides each output row by its sum of exponentials.
func (b *Backend) Attention(dst, q, k, v backend.Tensor, nHeads, nKVHeads int) {
	d, qs, ks, vs, hd := attnOperands(dst, q, k, v, nHeads, nKVHeads, "Attention")
	nq, nk := qs.rows, ks.rows
	if nq == 0 || hd == 0 {
		return
	}
	if nk == 0 { // an empty sum: every output is 0
		for i := 0; i < nq; i++ {
			clear(d.Row(i))
		}
		return
	}
	group := nHeads / nKVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	workers := b.threads
	// Tiny attentions run on one thread: under minTeamFlops as a job of
	// the C team (the fused kernels), under minSplitFlops on goroutines.
	if flops := 4 * nq * nk * qs.cols; flops < minTeamFlops || b.attn == attnNone && flops < minSplitFlops {
		workers = 1
	}
	// Blocks of equal size (a multiple of 24 rows: whole row blocks of
	// both fused kernels), at most maxAttnBlock, and enough of them for 8
	// tasks a goroutine where the rows allow blocks of 24 or more: tasks
	// of unequal size, or too few, leave a core idle at the end of the
	// call (a canvas of 190 rows and 4 heads was cut into blocks of 128
	// and 62, 8 tasks for 2 goroutines).
	blocks := (nq + maxAttnBlock - 1) / maxAttnBlock
	if workers > 1 {
		want := (8*workers + nHeads - 1) / nHeads
		blocks = max(blocks, min(want, (nq+23)/24))
	}
	attnBlock := ((nq+blocks-1)/blocks + 23) / 24 * 24
	blocks = (nq + attnBlock - 1) / attnBlock
	workers = min(workers, nHeads*blocks)
	fused := b.attn != attnNone
	if l := b.keptLayout(ks, vs, hd, nKVHeads); l != nil {
		// NewKV's pair: lay out only the keys written since the last
		// attention over them.
		var ap attnParts
		ap.addKept(d, qs, ks, vs, hd, l, blocks, attnBlock)
		b.runAttn(&ap, workers, hd, group, scale)
		return
	}
	// The fused kernel reads each kv head's kᵀ [hd, ldt] and v [nk, hd]
	// laid out for it, made for a group of kv heads at a time: as many as
	// fit in attnGroupPack floats (4 of l16-d2048's at 256 keys; one of
	// LLaDA-8B's at a sequence of 512).
	kvGroup := nKVHeads
	if fused {
		per := attnLayout(hd, nk)
		kvGroup = max(1, min(nKVHeads, attnGroupPack/per))
		buf := b.getScratch(kvGroup * per)
		defer b.putScratch(buf)
		for g0 := 0; g0 < nKVHeads; g0 += kvGroup {
			// One job of the C team: lay out the group's kv heads, then
			// run its query heads' blocks.
			var ap attnParts
			ap.add(d, qs, ks, vs, hd, buf, g0, min(nKVHeads, g0+kvGroup)-g0, blocks, attnBlock)
			b.runAttn(&ap, workers, hd, group, scale)
		}
		return
	}
	for g0 := 0; g0 < nKVHeads; g0 += kvGroup {
		g1 := min(nKVHeads, g0+kvGroup)
		// The tasks of this group's query heads.
		h0, tasks := g0*group, (g1-g0)*group*blocks
		var next atomic.Int64
		work := func() {
			rows := min(attnBlock, nq)
			buf := b.getScratch(rows*nk + rows)
			defer b.putScratch(buf)
			for {
				t := int(next.Add(1) - 1)
				if t >= tasks {
					return
				}
				h, blk := h0+t/blocks, t%blocks
				kh := h / group
				r0 := blk * attnBlock
				m := min(attnBlock, nq-r0)
				qv := qs.data[r0*qs.stride+h*hd:]
				ov := d.data[r0*d.stride+h*hd:]
				scores, inv := buf[:rows*nk], buf[rows*nk:]
				b.gemmNT(m, nk, hd, scale, qv, qs.stride, ks.data[kh*hd:], ks.stride, scores, nk)
				softmaxRows(scores, m, nk, inv)
				b.gemmNN(m, hd, nk, 1, scores, nk, vs.data[kh*hd:], vs.stride, ov, d.stride)
				for i := 0; i < m; i++ {
					o := ov[i*d.stride : i*d.stride+hd]
					s := inv[i]
					for j := range o {
						o[j] *= s
					}
				}
			}
		}
		onGoroutines(min(workers, tasks), work)
	}
}

// maxBatchAttnBlock is the most query rows of one task of AttentionBatch:
// a batch makes tasks enough for every core, so they can be small, the
// last to finish soon after the others.
const maxBatchAttnBlock = 48

// AttentionBatch implements backend.AttentionBatcher: on the fused
// kernels, every attention's kv head layouts and query blocks are one job
// of the C team, tasks claimed across attentions (a batch's requests are
// small attentions, each alone too few tasks to keep the cores even);
// otherwise, and where the layouts would take more than maxAttnPack
// floats, Attention one after the other.
func (b *Backend) AttentionBatch(dst, q, k, v []backend.Tensor, nHeads, nKVHeads int) {
	if len(q) != len(dst) || len(k) != len(dst) || len(v) != len(dst) {
		shapePanic("AttentionBatch", "%d dst, %d q, %d k, %d v", len(dst), len(q), len(k), len(v))
	}
	type operands struct{ d, q, k, v *Tensor }
	ops := make([]operands, len(dst))
	// Attentions over leading rows of the same keys and values (a
	// block-causal request's attention blocks: each over the key prefix
	// through its block) share one layout, the longest's.
	type kvAt struct {
		k, v     *float32
		ldk, ldv int
	}
	longest := map[kvAt]int{}
	at := func(o operands) kvAt { return kvAt{&o.k.data[0], &o.v.data[0], o.k.stride, o.v.stride} }
	hd, flops, nonEmpty := 0, 0.0, true
	for i := range dst {
		d, qs, ks, vs, h := attnOperands(dst[i], q[i], k[i], v[i], nHeads, nKVHeads, "AttentionBatch")
		ops[i], hd = operands{d, qs, ks, vs}, h
		flops += 4 * float64(qs.rows) * float64(ks.rows) * float64(qs.cols)
		nonEmpty = nonEmpty && qs.rows > 0 && ks.rows > 0 && hd > 0
		if !nonEmpty {
			break
		}
		if j, ok := longest[at(ops[i])]; !ok || ks.rows > ops[j].k.rows {
			longest[at(ops[i])] = i
		}
	}
	// NewKV's pairs lay out only the keys written since the last
	// attention over them, in their kept layouts.
	kept := map[kvAt]*kvLayout{}
	size := 0
	for at, i := range longest {
		if l := b.keptLayout(ops[i].k, ops[i].v, hd, nKVHeads); l != nil {
			kept[at] = l
			continue
		}
		size += nKVHeads * attnLayout(hd, ops[i].k.rows)
	}
	if b.attn == attnNone || !nonEmpty || size > maxAttnPack {
		for i := range dst {
			b.Attention(dst[i], q[i], k[i], v[i], nHeads, nKVHeads)
		}
		return
	}
	buf := b.getScratch(size)
	defer b.putScratch(buf)
	var ap attnParts
	split := func(nq int) (blocks, block int) {
		blocks = (nq + maxBatchAttnBlock - 1) / maxBatchAttnBlock
		block = ((nq+blocks-1)/blocks + 5) / 6 * 6
		return (nq + block - 1) / block, block
	}
	// The layouts' owners first, in order, then the attentions sharing
	// them (the team lays a layout out before any task reads it).
	part, off := map[kvAt]int{}, 0
	for i, o := range ops {
		if longest[at(o)] != i {
			continue
		}
		blocks, block := split(o.q.rows)
		part[at(o)] = len(ap.parts)
		if l := kept[at(o)]; l != nil {
			ap.addKept(o.d, o.q, o.k, o.v, hd, l, blocks, block)
			continue
		}
		per := nKVHeads * attnLayout(hd, o.k.rows)
		ap.add(o.d, o.q, o.k, o.v, hd, buf[off:off+per], 0, nKVHeads, blocks, block)
		off += per
	}
	for i, o := range ops {
		if longest[at(o)] != i {
			blocks, block := split(o.q.rows)
			ap.share(o.d, o.q, o.k.rows, part[at(o)], nHeads/nKVHeads, blocks, block)
		}
	}
	workers := b.threads
	if flops < minTeamFlops {
		workers = 1
	}
	b.runAttn(&ap, workers, hd, nHeads/nKVHeads, float32(1/math.Sqrt(float64(hd))))
}

var _ backend.AttentionBatcher = (*Backend)(nil)

// attnLdt is the row stride of a kv head's transposed keys in the fused
// kernels' layouts: nk up to whole cache lines (and whole 16-key panels).
func attnLdt(nk int) int { return (nk + 15) &^ 15 }

// attnLayout is the floats of one kv head's layout for the fused kernels
// (attn_pack, attn_pack2): kᵀ [hd × attnLdt(nk)], then v, room for it in
// panels of 16 columns.
func attnLayout(hd, nk int) int {
	return hd*attnLdt(nk) + ((hd+15)&^15)*nk
}

// attnOperands checks Attention's operands (op names the caller) and
// returns them with the head size.
func attnOperands(dst, q, k, v backend.Tensor, nHeads, nKVHeads int, op string) (d, qs, ks, vs *Tensor, hd int) {
	d, qs, ks, vs = writable(dst, op), tensor(q, op), tensor(k, op), tensor(v, op)
	hd, err := backend.CheckAttention(op, d, qs, ks, vs, nHeads, nKVHeads)
	checked(err)
	return d, qs, ks, vs, hd
}

// onGoroutines runs work on up to workers goroutines (the caller's among them) and
// returns when all have returned; work takes its own tasks until none are
// left.
func onGoroutines(workers int, work func()) {
	if workers <= 1 {
		work()
		return
	}
	var wg sync.WaitGroup
	wg.Add(workers - 1)
	for range workers - 1 {
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}

// getScratch returns a float32 buffer of n elements, contents arbitrary,
// from the backend's pool; putScratch gives it back.
func (b *Backend) getScratch(n int) []float32 { return b.bufs.scratch(n) }

func (b *Backend) putScratch(s []float32) { b.bufs.put(s) }

// AttentionWeights writes into dst [nq·nk] the head-mean of
// softmax(q·kᵀ/√hd): the weights Attention applies, materialised for the
// plans that ask for them (d2Cache's rollout, Elastic-Cache's drift). It
// implements backend.AttentionWeigher with the same score and softmax
// kernels as Attention.
func (b *Backend) AttentionWeights(dst []float32, q, k backend.Tensor, nHeads, nKVHeads int) {
	qs, ks := tensor(q, "AttentionWeights"), tensor(k, "AttentionWeights")
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || qs.cols%nHeads != 0 || ks.cols != nKVHeads*(qs.cols/nHeads) || len(dst) != qs.rows*ks.rows {
		shapePanic("AttentionWeights", "q %v, k %v, %d heads, %d kv heads, dst %d", qs, ks, nHeads, nKVHeads, len(dst))
	}
	hd, nq, nk := qs.cols/nHeads, qs.rows, ks.rows
	clear(dst)
	if nq == 0 || nk == 0 {
		return
	}
	buf := b.getScratch(nq*nk + nq)
	defer b.putScratch(buf)
	scores, inv := buf[:nq*nk], buf[nq*nk:]
	scale := float32(1 / math.Sqrt(float64(hd)))
	group := nHeads / nKVHeads
	for h := 0; h < nHeads; h++ {
		b.gemmNT(nq, nk, hd, scale, qs.data[h*hd:], qs.stride, ks.data[(h/group)*hd:], ks.stride, scores, nk)
		softmaxRows(scores, nq, nk, inv)
		for i := 0; i < nq; i++ {
			s := inv[i] / float32(nHeads)
			row, out := scores[i*nk:(i+1)*nk], dst[i*nk:(i+1)*nk]
			for j, e := range row {
				out[j] += e * s
			}
		}
	}
}
