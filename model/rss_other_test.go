//go:build !linux

package model

// maxRSS is 0 (not measured) off Linux.
func maxRSS() float64 { return 0 }
