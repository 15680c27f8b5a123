//go:build !linux

package dynamotest

import "syscall"

// procAttr is nil where there is no parent-death signal: a test binary that
// dies without reaching Main's cleanup leaves DynamoDB Local running.
func procAttr() *syscall.SysProcAttr { return nil }
