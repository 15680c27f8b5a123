//go:build !unix

package cli

// openFileLimit: the platform has no such limit to read.
func openFileLimit() (int, bool) { return 0, false }
