// Package procstat reads what a process has used so far from Linux's
// /proc: its CPU time and the bytes it has written to storage. The load
// scripts and benchmarks report them per request, figures that hold
// steadier than rates on a machine shared with other work.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is what a process has used so far.
type Usage struct {
	CPU     time.Duration // user and system time
	Written int64         // bytes it caused to be written to storage
}

// Sub is u less an earlier reading.
func (u Usage) Sub(earlier Usage) Usage {
	return Usage{CPU: u.CPU - earlier.CPU, Written: u.Written - earlier.Written}
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// Read reads the usage of the process pid ("self": this one). It fails
// where there is no /proc (not Linux).
func Read(pid string) (Usage, error) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return Usage{}, err
	}
	// utime and stime are fields 14 and 15; the command name before them
	// may hold spaces, so count from the parenthesis that ends it.
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return Usage{}, fmt.Errorf("procstat: unexpected /proc/%s/stat: %q", pid, stat)
	}
	var u Usage
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("procstat: /proc/%s/stat: %w", pid, err)
		}
		u.CPU += time.Duration(n) * clockTick
	}
	io, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return Usage{}, err
	}
	for line := range strings.Lines(string(io)) {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			if u.Written, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
				return Usage{}, fmt.Errorf("procstat: /proc/%s/io: %w", pid, err)
			}
		}
	}
	return u, nil
}
