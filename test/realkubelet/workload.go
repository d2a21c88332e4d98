package realkubelet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/test/kubelet"
)

// criEvent is a line of the fake CRI's events file (its Event type).
type criEvent struct {
	Kind      string   `json:"kind"`
	Container string   `json:"container"`
	Mounts    []string `json:"mounts"`
}

// volData is what the kubelet's CSI plugin keeps beside a pod's volume
// mount: which driver and volume it is.
type volData struct {
	Driver string `json:"driverName"`
	Handle string `json:"volumeHandle"`
}

// workload runs the node's containers' I/O: for every container the fake
// CRI says runs, a writer per CSI volume it mounts writes through the
// driver's node socket, as the real container would through its mount,
// until the runtime says it stopped, whatever the kubelet does meanwhile
// (a frozen kubelet's containers keep running). It tails the events file.
type workload struct {
	node     string
	root     string
	interval time.Duration
	heldOpen bool
	conns    map[string]*grpc.ClientConn // by driver name

	mu      sync.Mutex
	writers map[string]*writer // by container
	held    []*writer          // writers left to a process holding volumes open
	writes  []kubelet.Write
	seq     int
	offset  int64
	wg      sync.WaitGroup
}

// writer is one container's writes.
type writer struct {
	cancel context.CancelFunc
	// held: the container stopped, and a process outside it holds its
	// volumes open (Config.HeldOpen) until they are unpublished under it.
	held atomic.Bool
}

func newWorkload(node, root string, drivers map[string]string, interval time.Duration, heldOpen bool) (*workload, error) {
	w := &workload{node: node, root: root, interval: interval, heldOpen: heldOpen, conns: map[string]*grpc.ClientConn{}, writers: map[string]*writer{}}
	for name, ep := range drivers {
		if !strings.Contains(ep, "://") {
			ep = "unix://" + ep
		}
		c, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			w.close()
			return nil, fmt.Errorf("connecting to driver %s at %s: %w", name, ep, err)
		}
		w.conns[name] = c
	}
	return w, nil
}

// follow applies the events appended to path since the last call.
func (w *workload) follow(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	w.mu.Lock()
	off := w.offset
	w.mu.Unlock()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil // a partial line waits for the next call
		}
		off += int64(len(line))
		w.mu.Lock()
		w.offset = off
		w.mu.Unlock()
		var ev criEvent
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Kind {
		case "start":
			w.start(ctx, ev)
		case "stop":
			w.stop(ev.Container)
		}
	}
}

// start starts the writer of a container that mounts CSI volumes.
func (w *workload) start(ctx context.Context, ev criEvent) {
	vols := w.csiVolumes(ev.Mounts)
	if len(vols) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writers[ev.Container] != nil {
		return
	}
	cctx, cancel := context.WithCancel(ctx)
	wr := &writer{cancel: cancel}
	w.writers[ev.Container] = wr
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run(cctx, wr, vols)
	}()
}

// csiVolumes reads which CSI volumes the mounts are: a CSI volume's mount
// is <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount, with its
// vol_data.json beside it.
func (w *workload) csiVolumes(mounts []string) []volData {
	var out []volData
	for _, m := range mounts {
		if filepath.Base(m) != "mount" || !strings.Contains(m, "/volumes/kubernetes.io~csi/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(m), "vol_data.json"))
		if err != nil {
			continue
		}
		var v volData
		if json.Unmarshal(b, &v) == nil && v.Handle != "" && w.conns[v.Driver] != nil {
			out = append(out, v)
		}
	}
	return out
}

func (w *workload) run(ctx context.Context, wr *writer, vols []volData) {
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, v := range vols {
			w.mu.Lock()
			w.seq++
			seq := w.seq
			w.mu.Unlock()
			sent := time.Now()
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := client.Write(wctx, w.conns[v.Driver], v.Handle, fmt.Appendf(nil, "%s write %d at %s", w.node, seq, sent.Format(time.RFC3339Nano)))
			cancel()
			if ctx.Err() != nil {
				return
			}
			w.mu.Lock()
			w.writes = append(w.writes, kubelet.Write{Sent: sent, Time: time.Now(), VolumeID: v.Handle, Driver: v.Driver, Seq: seq, PoweredOn: true, Err: err})
			w.mu.Unlock()
			if wr.held.Load() && unpublished(err) {
				return // the node no longer has the volume: it went from under the process
			}
		}
	}
}

// unpublished reports whether a write failed because the node no longer
// has the volume, neither attached nor staged (a fence refuses with
// PermissionDenied instead, and the process holding it tries on).
func unpublished(err error) bool {
	c := status.Code(err)
	return c == codes.FailedPrecondition || c == codes.NotFound
}

// stop ends a container's writes, or with heldOpen leaves them to the
// process that holds its volumes open.
func (w *workload) stop(container string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wr := w.writers[container]
	if wr == nil {
		return
	}
	delete(w.writers, container)
	if w.heldOpen {
		wr.held.Store(true)
		w.held = append(w.held, wr)
		return
	}
	wr.cancel()
}

// stopAll stops every writer: the containers are gone (a power cut, a
// reboot).
func (w *workload) stopAll() {
	w.mu.Lock()
	for id, wr := range w.writers {
		wr.cancel()
		delete(w.writers, id)
	}
	for _, wr := range w.held {
		wr.cancel()
	}
	w.held = nil
	w.mu.Unlock()
	w.wg.Wait()
}

// restart forgets the events read so far: a new fake CRI writes a new
// file.
func (w *workload) restart() {
	w.mu.Lock()
	w.offset = 0
	w.mu.Unlock()
}

// Writes returns every write attempt so far, oldest first.
func (w *workload) Writes() []kubelet.Write {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]kubelet.Write(nil), w.writes...)
}

func (w *workload) close() {
	w.stopAll()
	for _, c := range w.conns {
		_ = c.Close()
	}
}
