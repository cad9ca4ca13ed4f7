// Package profile measures, per model, how similar a shared prefix's K/V
// computed alone are to the ones computed inside full requests, layer by layer
// and step by step, and runs the parameter sweeps (τ, refresh period R,
// requests per bin N) built on those measurements.
package profile
