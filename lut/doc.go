// Package lut holds the ratio→safe-depth lookup table that profiling writes
// and serving reads: its JSON format (dlmcache.lut/v3, Format; v2 and v1 files are still read), construction from
// similarity measurements at any τ, lookup with clamping, and the L1 distance
// between two tables.
package lut
