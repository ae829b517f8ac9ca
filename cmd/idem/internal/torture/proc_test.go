package torture

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readProc reads how a process runs (command, environment, directory,
// user, output file) and start starts it again so: the fence's restart of
// a Patroni agent.
func TestProcRestart(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.log")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	// A shell that writes its marker, then waits to be read.
	cmd := exec.Command("sh", "-c", `echo "started $IDEM_PROC_MARK in $(pwd)"; exec sleep 60`)
	cmd.Env, cmd.Dir, cmd.Stdout = append(os.Environ(), "IDEM_PROC_MARK=mark-1"), dir, f
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	f.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var p proc
	deadline := time.Now().Add(10 * time.Second)
	for { // until the shell has exec'd sleep
		if p, err = readProc(cmd.Process.Pid); err == nil && len(p.args) > 0 && p.args[0] == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readProc: %+v %v, want the sleep the shell became", p, err)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc with a deadline
	}
	if !slices.Contains(p.env, "IDEM_PROC_MARK=mark-1") || p.dir != dir || p.out != out || p.uid != os.Getuid() {
		t.Fatalf("readProc: dir %q, out %q, uid %d, marker in env %v; want %q, %q, %d, true", p.dir, p.out, p.uid, slices.Contains(p.env, "IDEM_PROC_MARK=mark-1"), dir, out, os.Getuid())
	}
	p.args = []string{"sh", "-c", `echo "again $IDEM_PROC_MARK in $(pwd)"`}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	for {
		b, _ := os.ReadFile(out)
		if strings.Contains(string(b), "again mark-1 in "+dir) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted process wrote %q to its output, want its marker and directory", b)
		}
		time.Sleep(10 * time.Millisecond) // polling its output with a deadline
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	if err := (proc{}).start(); err == nil {
		t.Errorf("start with no command: got no error")
	}
}
