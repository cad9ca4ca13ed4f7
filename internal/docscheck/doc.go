// Package docscheck holds the tests that keep the project's prose a
// reference rather than a diary: README.md, CHANGELOG.md, DEVELOPERS.md and
// every page under docs/ and the bundled models' cards describe the system as it is, with no chapter or
// sentence named after a work period, an issue number or a commit
// (DEVELOPERS.md, "Docs"). It has no code of its own.
package docscheck
