// Package cgocheck holds the repository's check that C lives in .c files:
// no Go file's cgo preamble (the comment above import "C") holds more
// than MaxPreambleLines lines. The check is its test, run by go test ./...
// and so by make test.
package cgocheck

// MaxPreambleLines is the most non-blank lines a cgo preamble may hold:
// #cgo directives, includes and a few declarations; kernels go in .c
// files beside the Go file, declared in a header the preamble includes.
const MaxPreambleLines = 50
