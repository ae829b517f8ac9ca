package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CPU is the processor time one phase took, per delivery: where the time
// goes on the client (this process: the engine, or a baseline's SQL, and
// an embedded broker, which runs in this process; an external broker's
// time is nowhere) and on the server (every process of the PostgreSQL server: backends, the WAL
// writer, the checkpointer, autovacuum). ServerUs is measured only when
// the server runs on this machine and /proc shows its processes; it is 0
// otherwise. It counts every client of that server, so measure on a server
// with nothing else to do.
type CPU struct {
	ClientUs float64 `json:"client_us_per_delivery"`
	ServerUs float64 `json:"server_us_per_delivery"`
	// Server says how ServerUs was measured, or why it was not.
	Server string `json:"server"`
}

// clkTck is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clkTck = 100

// cpuMeter takes the CPU times at the start of a phase.
type cpuMeter struct {
	client0    time.Duration
	postmaster int // 0: the server's processes are not visible
	server0    time.Duration
	why        string
}

// startCPU reads the client's and the server's CPU times so far. The
// server is found through a backend of pool: its parent process is the
// postmaster, whose children are the server.
func startCPU(ctx context.Context, pool *pgxpool.Pool) (*cpuMeter, error) {
	m := &cpuMeter{client0: clientCPU()}
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil, fmt.Errorf("cpu: backend pid: %w", err)
	}
	pm, err := postmasterOf(backend)
	if err != nil {
		m.why = "not measured: " + err.Error()
		return m, nil
	}
	if m.server0, err = serverCPU(pm); err != nil {
		m.why = "not measured: " + err.Error()
		return m, nil
	}
	m.postmaster = pm
	return m, nil
}

// finish returns the CPU per delivery since startCPU.
func (m *cpuMeter) finish(deliveries int) *CPU {
	n := float64(max(deliveries, 1))
	c := &CPU{ClientUs: float64((clientCPU() - m.client0).Microseconds()) / n, Server: m.why}
	if m.postmaster == 0 {
		return c
	}
	t, err := serverCPU(m.postmaster)
	if err != nil {
		c.Server = "not measured: " + err.Error()
		return c
	}
	c.ServerUs = float64((t - m.server0).Microseconds()) / n
	c.Server = fmt.Sprintf("/proc: postmaster %d and its children", m.postmaster)
	return c
}

// clientCPU is this process's user and system time.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStat is what cpu.go reads of /proc/<pid>/stat.
type procStat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

// parseStat parses a /proc/<pid>/stat line. The command name sits in
// parentheses and may itself hold spaces and parentheses, so the fields
// are counted from the last ')'.
func parseStat(s string) (procStat, error) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(s[end+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procStat{}, errors.New("short /proc stat line")
	}
	p := procStat{comm: s[open+1 : end]}
	var err error
	num := func(i int) int64 {
		v, e := strconv.ParseInt(f[i], 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("/proc stat field %d: %w", i+3, e)
		}
		return v
	}
	p.ppid = int(num(1))
	p.utime, p.stime, p.cutime, p.cstime = num(11), num(12), num(13), num(14)
	return p, err
}

// postmasterOf returns the postmaster of the PostgreSQL backend pid, or an
// error saying why it is not visible (another machine, a container).
func postmasterOf(backend int) (int, error) {
	st, err := readStat(backend)
	if err != nil {
		return 0, fmt.Errorf("the server's backend %d is not a process on this machine", backend)
	}
	pm, err := readStat(st.ppid)
	if err != nil || !strings.HasPrefix(pm.comm, "postgres") || !strings.HasPrefix(st.comm, "postgres") {
		return 0, fmt.Errorf("process %d is not a PostgreSQL backend under its postmaster", backend)
	}
	return st.ppid, nil
}

// serverCPU is the CPU time of the postmaster pm, of its live children
// (with the time of the processes they reaped), and of the children it
// has reaped itself (a backend's time moves to the postmaster's cutime
// and cstime when it exits, so a connection closed during a phase still
// counts). A child reaped between the postmaster's reading and its own
// would be in neither, so the scan is repeated until the postmaster's
// reaped total did not change during it.
func serverCPU(pm int) (time.Duration, error) {
	for range 10 {
		before, err := readStat(pm)
		if err != nil {
			return 0, fmt.Errorf("postmaster %d: %w", pm, err)
		}
		children, err := childrenCPU(pm)
		if err != nil {
			return 0, err
		}
		after, err := readStat(pm)
		if err != nil {
			return 0, fmt.Errorf("postmaster %d: %w", pm, err)
		}
		if after.cutime+after.cstime == before.cutime+before.cstime {
			ticks := after.utime + after.stime + after.cutime + after.cstime + children
			return time.Duration(ticks) * time.Second / clkTck, nil
		}
	}
	return 0, fmt.Errorf("postmaster %d: its children kept exiting during ten scans of /proc", pm)
}

// childrenCPU is the CPU time, in clock ticks, of pm's live children and
// of the processes they reaped.
func childrenCPU(pm int) (int64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		c, err := readStat(pid)
		if err != nil {
			continue // exited since ReadDir: its time is in the postmaster's cutime
		}
		if c.ppid == pm {
			ticks += c.utime + c.stime + c.cutime + c.cstime
		}
	}
	return ticks, nil
}

// writeCPU prints the CPU per delivery of the baselines and the runs.
func (rep *Report) writeCPU(p *errWriter) {
	p.printf("\nCPU per delivery (µs) over the throughput phase: client = this process (with an embedded broker), server = the PostgreSQL\n")
	p.printf("server's processes (all its clients: measure on a server with nothing else to do)\n\n")
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tclient\tserver\ttotal\t")
	row := func(name string, c *CPU) {
		if c == nil {
			return
		}
		server, total := "not measured", "–"
		if strings.HasPrefix(c.Server, "/proc") {
			server, total = fmt.Sprintf("%.1f", c.ServerUs), fmt.Sprintf("%.1f", c.ClientUs+c.ServerUs)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t\n", name, c.ClientUs, server, total)
	}
	for _, b := range rep.Baselines {
		row("baseline ("+b.Name+")", b.CPU)
	}
	for _, r := range rep.Runs {
		row(transportName(r)+" "+configName(r), r.CPU)
	}
	_ = tw.Flush()
}
