//go:build !linux

package dynamotest

import "syscall"

// ProcAttr is nil where there is no parent-death signal: a test binary that
// dies without reaching Main's cleanup leaves its helpers running.
func ProcAttr() *syscall.SysProcAttr { return nil }
