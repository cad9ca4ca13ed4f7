// Package plots draws dlmcache's figures with gonum/plot: the layer×step
// similarity heatmap, safe depth against shared-prefix ratio, table
// convergence, the τ / refresh sweeps and the deep-layer reuse picture.
//
// Every figure is built from plain Go values (slices, maps, or a
// *lut.Table) and returned as a Figure — a *plot.Plot, or a Stack of plots
// that share one x axis — so callers can restyle it before Save writes it
// as PNG or SVG (by the file's extension, atomically: temp file + rename).
//
// Conventions: layers and denoising steps are numbered from 1 as in
// DESIGN.md; similarities are cosines in [-1, 1]; NaN marks a value that
// was not measured and is drawn as a gap (lines) or in grey (heatmap),
// never as a number.
//
// The golden images in testdata are rendered from fixed data by the tests;
// after a deliberate change to a figure, rewrite them with
//
//	go test ./plots -update
//
// and look at the new PNGs before committing them.
package plots
