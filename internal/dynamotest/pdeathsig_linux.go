package dynamotest

import "syscall"

// procAttr makes the kernel kill DynamoDB Local when the test binary dies
// without reaching Main's cleanup, as on a panic or a -timeout.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
