//go:build race

package cache

// raceDetector: the test binary runs under the race detector (several
// times slower), where the longest fixtures are sampled.
const raceDetector = true
