package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// machine describes where the figures were measured.
type machine struct {
	Cores    int    `json:"cores"`
	MemoryGB string `json:"memory_gb"`
	Go       string `json:"go"`
	OS       string `json:"os"`
}

func thisMachine() machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, MemoryGB: "unknown"}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.MemoryGB = fmt.Sprintf("%.1f", kb/1024/1024)
				}
			}
		}
	}
	return m
}

func (m machine) String() string {
	return fmt.Sprintf("%d cores, %s GB memory, %s, %s", m.Cores, m.MemoryGB, m.Go, m.OS)
}

// withCluster launches a control plane, runs fn and stops everything it
// started however fn ends. When fn fails the component logs are kept under
// test/output/<name> and the error says where.
func withCluster(ctx context.Context, name string, opts cluster.Options, fn func(*cluster.Cluster) error) (err error) {
	c, err := cluster.Launch(ctx, opts)
	defer func() {
		if c == nil {
			return
		}
		// FENCELINE_BENCH_KEEP_LOGS keeps the component logs of runs that
		// did not fail too, to look into a slow one.
		switch {
		case err != nil:
			if dir, serr := c.SaveLogs(name); serr == nil {
				err = fmt.Errorf("%w (component logs in %s)", err, dir)
			}
		case os.Getenv("FENCELINE_BENCH_KEEP_LOGS") != "":
			_, _ = c.SaveLogs(name + "-" + time.Now().Format("150405"))
		}
		c.Stop()
		if rerr := os.RemoveAll(c.Dir()); rerr != nil && err == nil {
			err = fmt.Errorf("removing the run directory: %w", rerr)
		}
	}()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	return fn(c)
}

// since returns t - t0, or -1 when t is unknown.
func since(t0, t time.Time) time.Duration {
	if t.IsZero() {
		return -1
	}
	return t.Sub(t0)
}
