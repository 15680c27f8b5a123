//go:build unix

package cli

import "syscall"

// openFileLimit is the process's limit on open file descriptors.
func openFileLimit() (int, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false
	}
	return int(min(rl.Cur, 1<<30)), true
}
