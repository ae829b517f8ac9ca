package torture

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// proc is how a process ran, read from /proc, to start it again as it
// was: the failover fault's fence kills a Patroni agent and restarts it.
type proc struct {
	args, env []string
	dir       string
	uid, gid  int
	out       string // where its standard output went, if a file
}

// readProc reads how pid runs.
func readProc(pid int) (proc, error) {
	var p proc
	base := fmt.Sprintf("/proc/%d/", pid)
	cmdline, err := os.ReadFile(base + "cmdline")
	if err != nil {
		return p, fmt.Errorf("read the command of process %d: %w", pid, err)
	}
	p.args = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	env, err := os.ReadFile(base + "environ")
	if err != nil {
		return p, fmt.Errorf("read the environment of process %d: %w", pid, err)
	}
	p.env = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	if p.dir, err = os.Readlink(base + "cwd"); err != nil {
		return p, fmt.Errorf("read the directory of process %d: %w", pid, err)
	}
	status, err := os.ReadFile(base + "status")
	if err != nil {
		return p, fmt.Errorf("read the status of process %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "Uid:" {
			p.uid, _ = strconv.Atoi(f[1])
		}
		if len(f) >= 2 && f[0] == "Gid:" {
			p.gid, _ = strconv.Atoi(f[1])
		}
	}
	if out, err := os.Readlink(base + "fd/1"); err == nil && strings.HasPrefix(out, "/") {
		if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() {
			p.out = out
		}
	}
	return p, nil
}

// start starts the process again, detached (its own session), as its
// user, its output appended where it went; it outlives this one.
func (p proc) start() error {
	if len(p.args) == 0 || p.args[0] == "" {
		return fmt.Errorf("no command to start")
	}
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env, cmd.Dir = p.env, p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if p.uid != os.Getuid() || p.gid != os.Getgid() {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.gid)}
	}
	if p.out != "" {
		f, err := os.OpenFile(p.out, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", p.out, err)
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", strings.Join(p.args, " "), err)
	}
	go func() { _ = cmd.Wait() }() // reaped if it ends first
	return nil
}
