// Package cache holds the cross-request prefix K/V store and the planners
// (no cache, prefix-everywhere, BiCache, block cache, and combinations) that
// steer the model's one forward pass through model.Plan.
package cache
