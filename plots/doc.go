// Package plots draws dlmcache's figures with gonum/plot: the layer×step
// similarity heatmap, safe depth against shared-prefix ratio, table
// convergence, and the τ / refresh sweeps.
package plots
