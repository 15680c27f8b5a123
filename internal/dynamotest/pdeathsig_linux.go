package dynamotest

import "syscall"

// ProcAttr makes the kernel kill a helper process (DynamoDB Local, fauxqs)
// when the test binary dies without reaching Main's cleanup, as on a panic
// or a -timeout.
func ProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
