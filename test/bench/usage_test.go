package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuTime returns the CPU time (user plus system) the process pid has
// used so far.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(data))
}

// parseStatCPU reads utime and stime, the 14th and 15th fields of a
// /proc/<pid>/stat line. The 2nd field, the command in parentheses, may
// hold spaces and parentheses itself, so fields are counted from its end.
func parseStatCPU(stat string) (time.Duration, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command field in %q", stat)
	}
	f := strings.Fields(stat[end+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("only %d fields after the command in %q", len(f), stat)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("CPU ticks %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// memory is a process's resident set, now and at its peak, in bytes.
type memory struct {
	RSS, Peak int64
}

// residentMemory reads VmRSS and VmHWM from /proc/<pid>/status.
func residentMemory(pid int) (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	return parseStatusMemory(f)
}

func parseStatusMemory(r io.Reader) (memory, error) {
	var m memory
	var found int
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("%s: unexpected value %q", key, rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.Peak = kb << 10
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if found != 2 {
		return m, fmt.Errorf("VmRSS or VmHWM missing")
	}
	return m, nil
}

// sumSamples adds up every sample of the metric family name in a Prometheus
// text exposition (all label sets), and reports whether there was one.
func sumSamples(exposition, name string) (float64, bool, error) {
	var sum float64
	found := false
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // another family with this prefix, e.g. name_bucket
		}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, false, fmt.Errorf("unterminated labels in %q", line)
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false, fmt.Errorf("no value in %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("value of %q: %w", line, err)
		}
		sum += v
		found = true
	}
	return sum, found, nil
}

// scrape returns the sum of the metric family name served at url.
func scrape(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("scraping %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	v, ok, err := sumSamples(string(body), name)
	if err != nil {
		return 0, fmt.Errorf("scraping %s: %w", url, err)
	}
	if !ok {
		return 0, fmt.Errorf("scraping %s: no %s", url, name)
	}
	return v, nil
}
