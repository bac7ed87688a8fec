//go:build !linux

package testserver

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts a server in its own process group, so a terminal's Ctrl-C
// reaches only the test binary. Without Linux's parent-death signal a server
// outlives a test binary that is killed; [Main] deletes its directory later.
func sysProcAttr(cred *syscall.Credential, group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Credential: cred}
}

// children returns the IDs of the processes whose parent is pid.
func children(pid int) []int {
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	var kids []int
	for _, f := range strings.Fields(string(out)) {
		if kid, err := strconv.Atoi(f); err == nil {
			kids = append(kids, kid)
		}
	}
	return kids
}
